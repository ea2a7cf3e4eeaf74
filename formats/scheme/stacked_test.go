package scheme

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/safetensors"
)

// ModelOpt's NVFP4 export of experts stacked in one parameter (nvidia's
// Llama-4 Scout/Maverick FP4, gpt-oss NVFP4): gate_up_proj U8 [E, in/2,
// out] beside gate_up_proj_weight_scale F8_E4M3 [E, in/16, out],
// gate_up_proj_weight_scale_2 and gate_up_proj_input_scale F32 [], and
// gpt-oss's gate_up_proj_bias. One module, no finding, and each value is
// e2m1(the nibble of byte [e, i/2, o], low for an even i) ·
// f32(e4m3(scale [e, i/16, o]) · scale_2), in every decode path.
func TestModelOptStackedExperts(t *testing.T) {
	const E, in, out = 3, 64, 24
	r := rand.New(rand.NewPCG(7, 8))
	packed := make([]byte, E*in/2*out)
	for i := range packed {
		packed[i] = byte(r.IntN(256))
	}
	scales := make([]byte, E*in/16*out)
	for i := range scales {
		scales[i] = byte(1 + r.IntN(0x7E)) // positive finite E4M3
	}
	s2 := float32(0.0123)
	f32 := func(v float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)) }
	const p = "model.layers.0.feed_forward.experts.gate_up_proj"
	mem := newMem(t, []safetensors.WriteTensor{
		{Name: p, DType: safetensors.U8, Shape: []uint64{E, in / 2, out}, Data: packed},
		{Name: p + "_weight_scale", DType: safetensors.F8_E4M3, Shape: []uint64{E, in / 16, out}, Data: scales},
		{Name: p + "_weight_scale_2", DType: safetensors.F32, Shape: []uint64{}, Data: f32(s2)},
		{Name: p + "_input_scale", DType: safetensors.F32, Shape: []uint64{}, Data: f32(0.5)},
		{Name: p + "_bias", DType: safetensors.BF16, Shape: []uint64{E, out}, Data: make([]byte, 2*E*out)},
	})
	s := &Scheme{Method: "modelopt", Family: FamilyNVFP4, QuantAlgo: "NVFP4"}
	mods := Group(mem.infos(), s, nil)
	if len(mods) != 1 {
		t.Fatalf("%d modules, want the stacked parameter's one: %v", len(mods), names(mods))
	}
	m := mods[0]
	roles := m.Tensors()
	if m.Name != p || m.Format != FormatNVFP4 || m.Layout != LayoutModelOptExpertsT || !slices.Equal(m.WeightShape, []uint64{E, in, out}) ||
		roles["weight"] != p || roles["weight_scale"] != p+"_weight_scale" || roles["weight_scale_2"] != p+"_weight_scale_2" || roles["input_scale"] != p+"_input_scale" || roles["bias"] != p+"_bias" {
		t.Fatalf("module %s %s %s %v, roles %v", m.Name, m.Format, m.Layout, m.WeightShape, roles)
	}
	if f := CheckModules(mods, s); len(f) != 0 {
		t.Fatalf("findings on a valid export: %+v", f)
	}
	want := func(row, o int) float32 {
		e, i := row/in, row%in
		b := packed[(e*in/2+i/2)*out+o]
		if i%2 == 1 {
			b >>= 4
		}
		return numeric.E2M1ToFloat32(b&15) * float32(numeric.E4M3ToFloat32(scales[(e*in/16+i/16)*out+o])*s2)
	}
	all, err := Dequantize(m, mem, 0, E*in)
	if err != nil {
		t.Fatal(err)
	}
	for row := range E * in {
		for o := range out {
			if got := all[row*out+o]; math.Float32bits(got) != math.Float32bits(want(row, o)) {
				t.Fatalf("[%d, %d] = %g, want %g", row, o, got, want(row, o))
			}
		}
	}
	part, err := Dequantize(m, mem, 77, 93) // odd start, across an expert and a 16-block
	if err != nil || !slices.Equal(part, all[77*out:93*out]) {
		t.Fatalf("rows 77:93: %v", err)
	}
	smp, err := SampleRows(m, mem, 5, 40, 0, out)
	if err != nil || !slices.Equal(smp.Values, all[5*out:40*out]) {
		t.Fatalf("sample: %v", err)
	}
	rs, err := OpenRows(m, mem)
	if err != nil {
		t.Fatal(err)
	}
	band := make([]float32, 19*out)
	if err := rs.NewDecoder().Decode(band, 61, 80, nil); err != nil || !slices.Equal(band, all[61*out:80*out]) {
		t.Fatalf("stream: %v", err)
	}
}

func names(mods []*Module) []string {
	var n []string
	for _, m := range mods {
		n = append(n, m.Name)
	}
	return n
}

// A multimodal ModelOpt export names its decoder language_model.…, its
// exclude list the bare module: "lm_head" leaves language_model.lm_head
// unquantized, as vLLM reads it (no "quantized but dense" warning).
func TestModelOptExcludeUnderLanguageModel(t *testing.T) {
	s := &Scheme{Method: "modelopt", Family: FamilyNVFP4, QuantAlgo: "NVFP4", ExcludeModules: []string{"lm_head", "vision_model*"}}
	for name, want := range map[string]string{"language_model.lm_head": "lm_head", "lm_head": "lm_head", "vision_model.encoder.layers.0.mlp.fc1": "vision_model*",
		"language_model.model.layers.0.mlp.down_proj": "", "model.lm_head_extra": ""} {
		if got := s.ExcludedBy(name); got != want {
			t.Errorf("ExcludedBy(%q) = %q, want %q", name, got, want)
		}
	}
}
