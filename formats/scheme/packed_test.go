package scheme

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/synth"
)

// Packed hands over the stored form of the layouts that have one, reads
// their small tensors as Dequantize does (its values are checked against
// Dequantize's in kernels/cuda), says nil for the others, and names the
// tensor and rule of a bad one.
func TestPacked(t *testing.T) {
	w := weights(3, 16, 256)
	for _, c := range []struct {
		name string
		ts   []safetensors.WriteTensor
		s    *Scheme
		kind string
	}{
		{"dense", synth.Dense("m.weight", w), nil, ""},
		{"nvfp4", synth.NVFP4ModelOpt("m", w, 2, safetensors.F32), &Scheme{Method: "modelopt", Family: FamilyNVFP4}, "nvfp4"},
		{"fp8-block", synth.FP8Block("m", w, 128), &Scheme{Method: "fp8", Family: FamilyFP8}, "fp8"},
		{"gptq", synth.GPTQ("m", w, 4, 128), &Scheme{Method: "gptq", Bits: 4, GroupSize: 128, CheckpointFormat: "gptq"}, "int"},
	} {
		mem := newMem(t, c.ts)
		m := Group(mem.infos(), c.s, nil)[0]
		s, err := OpenRows(m, mem)
		if err != nil {
			t.Fatal(c.name, err)
		}
		p, err := s.Packed()
		if err != nil {
			t.Fatal(c.name, err)
		}
		switch {
		case c.kind == "" && p != nil:
			t.Fatalf("%s: Packed() = %+v, want nil", c.name, p)
		case c.kind != "" && (p == nil || p.Kind != c.kind || p.Rows != 16 || p.Cols != 256):
			t.Fatalf("%s: Packed() = %+v, want kind %s [16, 256]", c.name, p, c.kind)
		}
		switch c.name {
		case "fp8-block":
			// one scale row over 16 rows (no block declared): tiles of 16×128
			if p.R != 16 || p.C != 128 || len(p.Scales) != 2 {
				t.Fatalf("fp8 grid %d×%d with %d scales, want 16×128 with 2", p.R, p.C, len(p.Scales))
			}
		case "gptq":
			if len(p.Zeros) != 2*16 || len(p.GIdx) != 256 || p.GIdx[255] != 1 || len(p.Data) != 256*4/8*16 {
				t.Fatalf("gptq: %d zeros, g_idx %v…, %d bytes", len(p.Zeros), p.GIdx[250:], len(p.Data))
			}
		}
	}
	ts := synth.GPTQ("m", w, 4, 128)
	for i := range ts {
		if ts[i].Name == "m.g_idx" {
			binary.LittleEndian.PutUint32(ts[i].Data[4*7:], 5)
		}
	}
	mem := newMem(t, ts)
	m := Group(mem.infos(), &Scheme{Method: "gptq", Bits: 4, GroupSize: 128, CheckpointFormat: "gptq"}, nil)[0]
	s, err := OpenRows(m, mem) // it checks the layout on no rows
	if err == nil {
		_, err = s.Packed()
	}
	if err == nil || !strings.Contains(err.Error(), `tensor "m.g_idx": rule g_idx: entry 7 is 5`) {
		t.Fatalf("bad g_idx: error %v", err)
	}
}
