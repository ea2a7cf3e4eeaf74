package checkpoint

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/synth"
)

// Bytes of one linear [out, in] as each release stores it, from the
// producers' layouts (not from the code under test).
func fp8Bytes(out, in uint64) uint64 { return out*in + 4*((out+127)/128)*((in+127)/128) }
func nvfp4Bytes(out, in uint64) uint64 {
	return out*in/2 + out*in/16 + 4 + 4 // packed E2M1, E4M3 per 16, weight_scale_2, input_scale
}
func bf16Bytes(out, in uint64) uint64 { return 2 * out * in }

func cellOf(t *testing.T, rows []LayerRow, row string, layer int, slot string) LayerCell {
	t.Helper()
	for _, r := range rows {
		if r.Row == row && r.Layer == layer {
			for _, c := range r.Cells {
				if c.Slot == slot {
					return c
				}
			}
			t.Fatalf("row %s %d has no %s cell: %+v", row, layer, slot, r.Cells)
		}
	}
	t.Fatalf("no row %s %d", row, layer)
	return LayerCell{}
}

// The DeepSeek-V3-shaped NVFP4 release: attention BF16 in every layer,
// experts NVFP4, the MTP layer (index num_hidden_layers) all BF16 and marked
// extra; numbers as the layouts give them.
func TestLayerMapDeepSeek(t *testing.T) {
	d := synth.DeepSeekMini
	h, mi, e := uint64(d.Hidden), uint64(d.MoEIntermediate), uint64(d.Experts)
	ql, qb := uint64(d.QLoraRank), uint64(d.Heads*(d.NopeDim+d.RopeDim)) // q_a_proj [ql, h], q_b_proj [qb, ql]
	for _, tc := range []struct {
		repo             *synth.Repo
		attn, experts    string
		expertBytes      uint64
		qBytes           uint64 // q_a_proj + q_b_proj of one layer
		mtpExperts       string
		mtpExpertsBytes  uint64
		denseGate, dense string
	}{
		{synth.DeepSeekMiniNVFP4(), "bf16", "nvfp4", e * (2*nvfp4Bytes(mi, h) + nvfp4Bytes(h, mi)),
			bf16Bytes(ql, h) + bf16Bytes(qb, ql), "bf16", e * (2*bf16Bytes(mi, h) + bf16Bytes(h, mi)), "nvfp4", "nvfp4"},
		{synth.DeepSeekMiniFP8(), "fp8", "fp8", e * (2*fp8Bytes(mi, h) + fp8Bytes(h, mi)),
			fp8Bytes(ql, h) + fp8Bytes(qb, ql), "fp8", e * (2*fp8Bytes(mi, h) + fp8Bytes(h, mi)), "fp8", "fp8"},
	} {
		t.Run(tc.repo.ID, func(t *testing.T) {
			c := load(t, tc.repo)
			inv := c.InventoryWithoutTensors()
			rows := inv.Layers
			want := []string{RowEmbedding}
			for range d.Layers {
				want = append(want, RowLayer)
			}
			want = append(want, RowExtra, RowHead)
			if len(rows) != len(want) {
				t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
			}
			for i, r := range rows {
				if r.Row != want[i] {
					t.Errorf("row %d is %s, want %s", i, r.Row, want[i])
				}
				if (r.Row == RowLayer || r.Row == RowExtra) && r.Layer != i-1 {
					t.Errorf("row %d is layer %d", i, r.Layer)
				}
			}
			for l := range d.Layers + d.MTPLayers {
				row := RowLayer
				if l >= d.Layers {
					row = RowExtra
				}
				for _, slot := range []string{"q", "kv", "o"} {
					if c := cellOf(t, rows, row, l, slot); c.Format != tc.attn && !(row == RowExtra && c.Format == "bf16" && tc.attn == "bf16") {
						t.Errorf("layer %d %s: %s, want %s", l, slot, c.Format, tc.attn)
					}
				}
				q := cellOf(t, rows, row, l, "q")
				if q.Modules != 2 || q.Bytes != tc.qBytes || q.Parameters != ql*h+qb*ql {
					t.Errorf("layer %d q: %+v, want 2 modules, %d bytes", l, q, tc.qBytes)
				}
				if l < d.DenseLayers {
					if c := cellOf(t, rows, row, l, "gate"); c.Format != tc.denseGate || c.Modules != 1 {
						t.Errorf("layer %d gate: %+v", l, c)
					}
					continue
				}
				ex := cellOf(t, rows, row, l, "experts")
				wantF, wantB := tc.experts, tc.expertBytes
				if row == RowExtra {
					wantF, wantB = tc.mtpExperts, tc.mtpExpertsBytes
				}
				if ex.Format != wantF || ex.Bytes != wantB || ex.Modules != 3*d.Experts || ex.Experts != d.Experts ||
					ex.Parameters != e*3*mi*h || len(ex.Formats) != 1 || ex.Formats[0].Modules != 3*d.Experts {
					t.Errorf("layer %d experts: %+v, want %s, %d bytes, %d modules of %d experts", l, ex, wantF, wantB, 3*d.Experts, d.Experts)
				}
				if got, want := ex.BitsPerWeight, 8*float64(wantB)/float64(e*3*mi*h); got != want {
					t.Errorf("layer %d experts: %v bits/weight, want %v", l, got, want)
				}
				// The router: its BF16 weight and its F32 score bias.
				r := cellOf(t, rows, row, l, "router")
				if r.Format != FormatMixed || r.Bytes != bf16Bytes(e, h)+4*e || r.Modules != 2 || r.Formats[0].Format != "bf16" || r.Formats[1].Format != "f32" {
					t.Errorf("layer %d router: %+v", l, r)
				}
			}
			// The MTP layer carries its own embeddings and head.
			if c := cellOf(t, rows, RowExtra, d.Layers, "embedding"); c.Format != "bf16" || c.Bytes != bf16Bytes(uint64(d.Vocab), h) {
				t.Errorf("MTP embedding: %+v", c)
			}
			if c := cellOf(t, rows, RowHead, -1, "head"); c.Format != "bf16" || c.Modules != 1 {
				t.Errorf("head: %+v", c)
			}
			if c := cellOf(t, rows, RowHead, -1, "norm"); c.Modules != 1 {
				t.Errorf("final norm: %+v", c)
			}
			// Every module is in exactly one cell, which its pattern matches and no other does.
			var bytes, params uint64
			n := 0
			for _, r := range rows {
				bytes += r.Bytes
				params += r.Parameters
				for _, cell := range r.Cells {
					re := regexp.MustCompile(cell.Pattern)
					matched := 0
					for _, m := range inv.Modules {
						if re.MatchString(m.Name) {
							matched++
						}
					}
					if matched != cell.Modules {
						t.Errorf("%s %d %s: pattern %s matches %d modules, the cell holds %d", r.Row, r.Layer, cell.Slot, cell.Pattern, matched, cell.Modules)
					}
					n += cell.Modules
				}
			}
			if n != len(inv.Modules) || bytes != inv.Summary.Bytes || params != inv.Summary.Parameters {
				t.Errorf("cells hold %d modules, %d bytes, %d parameters; the repo %d, %d, %d", n, bytes, params, len(inv.Modules), inv.Summary.Bytes, inv.Summary.Parameters)
			}
		})
	}
}

// A second layer stack (a vision tower) gets rows of its own, after the
// decoder's; a module outside the layers that is neither embedding, head nor
// norm goes to the "other" row; mixed cells list their formats by bytes.
func TestLayerMapStacksAndMixes(t *testing.T) {
	mod := func(name, format string, bytes, params uint64) *scheme.Module {
		return &scheme.Module{Name: name, Format: format, Bytes: bytes, Parameters: params}
	}
	var ms []*scheme.Module
	for l := range 3 {
		ms = append(ms, mod(fmt.Sprintf("model.language_model.layers.%d.self_attn.q_proj", l), "nvfp4", 9, 16),
			mod(fmt.Sprintf("model.language_model.layers.%d.mlp.experts.0.up_proj", l), "nvfp4", 9, 16),
			mod(fmt.Sprintf("model.language_model.layers.%d.mlp.experts.1.up_proj", l), "bf16", 32, 16))
	}
	ms = append(ms, mod("model.vision_tower.encoder.layers.0.self_attn.q_proj", "bf16", 32, 16),
		mod("model.multi_modal_projector.linear_1", "bf16", 8, 4))
	rows := Layers(ms, 3)
	if len(rows) != 5 {
		t.Fatalf("%d rows: %+v", len(rows), rows)
	}
	for l := range 3 {
		if rows[l].Row != RowLayer || rows[l].Layer != l || rows[l].Stack != "" {
			t.Errorf("row %d: %+v", l, rows[l])
		}
		ex := rows[l].Cells[1]
		if ex.Slot != "experts" || ex.Format != FormatMixed || ex.Experts != 2 || ex.Formats[0].Format != "bf16" || ex.Formats[0].Bytes != 32 || ex.Formats[1].Format != "nvfp4" {
			t.Errorf("layer %d experts: %+v", l, ex)
		}
		if ex.Pattern != fmt.Sprintf(`^(?:model\.language_model\.layers\.%d\.mlp\.experts\.\d+\.up_proj)$`, l) {
			t.Errorf("pattern %s", ex.Pattern)
		}
	}
	if r := rows[3]; r.Row != RowLayer || r.Stack != "model.vision_tower.encoder.layers" || r.Layer != 0 {
		t.Errorf("vision row: %+v", r)
	}
	if r := rows[4]; r.Row != RowOther || r.Cells[0].Slot != "other" || r.Bytes != 8 {
		t.Errorf("other row: %+v", r)
	}
}
