package scheme

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/synth"
)

// gptqConfig is a GPT-QModel config.json with the given dynamic object
// (raw JSON, in the order it is to be tried).
func gptqConfig(dynamic string) []byte {
	return []byte(`{"model_type":"llama","quantization_config":{"quant_method":"gptq","bits":4,"group_size":128,"sym":true,"desc_act":false,"checkpoint_format":"gptq","dynamic":` + dynamic + `}}`)
}

// GPT-QModel's dynamic: the first pattern in file order that matches the
// module's name at its start decides; "-:" leaves it unquantized; the
// overrides replace the base config's fields one by one. Patterns RE2
// cannot run (a lookahead, as GPT-QModel's PCRE allows) still match.
func TestDynamicRules(t *testing.T) {
	s, err := Detect(gptqConfig(`{
		"-:.*lm_head": {},
		"+:model\\.layers\\.1\\..*down_proj": {"bits": 8, "group_size": 64},
		".*down_proj": {"bits": 3, "damp_percent": 0.05},
		"model\\.layers\\.(?!0\\.).*q_proj": {"sym": false, "desc_act": true}
	}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Dynamic) != 4 || s.Dynamic[0].Pattern != "-:.*lm_head" || s.Dynamic[3].Pattern != `model\.layers\.(?!0\.).*q_proj` {
		t.Fatalf("rules %+v, want the four in file order", s.Dynamic)
	}
	no, yes := false, true
	for _, c := range []struct {
		name string
		want DynamicParams
	}{
		{"lm_head", DynamicParams{Bits: 4, GroupSize: 128, Symmetric: &yes, Skip: true, Rule: "-:.*lm_head"}},
		// two rules match: the first written wins
		{"model.layers.1.mlp.down_proj", DynamicParams{Bits: 8, GroupSize: 64, Symmetric: &yes, Rule: `+:model\.layers\.1\..*down_proj`}},
		{"model.layers.2.mlp.down_proj", DynamicParams{Bits: 3, GroupSize: 128, Symmetric: &yes, Rule: ".*down_proj"}},
		// layers.10: the second rule wants a dot right after the 1
		{"model.layers.10.mlp.down_proj", DynamicParams{Bits: 3, GroupSize: 128, Symmetric: &yes, Rule: ".*down_proj"}},
		{"model.layers.3.self_attn.q_proj", DynamicParams{Bits: 4, GroupSize: 128, Symmetric: &no, DescAct: true, Rule: `model\.layers\.(?!0\.).*q_proj`}},
		// the lookahead keeps layer 0 out; nothing else matches
		{"model.layers.0.self_attn.q_proj", DynamicParams{Bits: 4, GroupSize: 128, Symmetric: &yes}},
		{"model.layers.0.mlp.up_proj", DynamicParams{Bits: 4, GroupSize: 128, Symmetric: &yes}},
	} {
		got := s.DynamicFor(c.name)
		if got.Bits != c.want.Bits || got.GroupSize != c.want.GroupSize || *got.Symmetric != *c.want.Symmetric ||
			got.DescAct != c.want.DescAct || got.Skip != c.want.Skip || got.Rule != c.want.Rule {
			t.Errorf("%s: %+v (sym %v), want %+v (sym %v)", c.name, got, *got.Symmetric, c.want, *c.want.Symmetric)
		}
	}
	// Matched at the start only: "mlp" is no rule for model.layers.0.mlp.
	s2, err := Detect(gptqConfig(`{"mlp": {"bits": 8}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := s2.DynamicFor("model.layers.0.mlp.gate_proj"); p.Rule != "" {
		t.Errorf("a pattern matched inside the name, not at its start: %+v", p)
	}
	// The same two down_proj rules the other way round: the file's order
	// decides, not the map's.
	s3, err := Detect(gptqConfig(`{".*down_proj": {"bits": 3}, "model\\.layers\\.1\\..*down_proj": {"bits": 8}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := s3.DynamicFor("model.layers.1.mlp.down_proj"); p.Bits != 3 {
		t.Errorf("the first rule written did not win: %+v", p)
	}
	// A pattern written twice is one rule, at its first place, with its
	// last overrides (Python's dict).
	s4, err := Detect(gptqConfig(`{"a.*": {"bits": 8}, "b": {}, "a.*": {"bits": 3}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(s4.Dynamic) != 2 || s4.Dynamic[0].Pattern != "a.*" || s4.Dynamic[0].Bits != 3 {
		t.Errorf("duplicate pattern read as %+v", s4.Dynamic)
	}

	// "-:" is a statement: the module is declared unquantized.
	head := &Module{Name: "lm_head", Kind: "head", Format: "bf16", WeightShape: []uint64{32, 64}}
	if q, known := s.Declared(head); q || !known {
		t.Errorf("lm_head under -:.*lm_head declared (%v, %v), want not quantized, known", q, known)
	}
	down := &Module{Name: "model.layers.1.mlp.down_proj", Kind: "mlp", Format: "int8", WeightShape: []uint64{32, 64}}
	if q, _ := s.Declared(down); !q {
		t.Error("a module under an overriding rule declared unquantized")
	}
}

// A module a dynamic rule stores at other bits and group size is grouped
// and decoded at those: the same values as a checkpoint whose base config
// says them. Read with the base config's 4 bits, its shape would be wrong.
func TestDynamicDecodes(t *testing.T) {
	w := weights(21, 48, 256)
	name := "model.layers.1.mlp.down_proj"
	mem := newMem(t, synth.GPTQ(name, w, 8, 64))
	s, err := Detect(gptqConfig(`{"+:model\\.layers\\.1\\..*down_proj": {"bits": 8, "group_size": 64}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := Group(mem.infos(), s, nil)[0]
	if m.Format != "int8" || m.Bits != 8 || m.GroupSize != 64 || m.WeightShape[0] != 48 || m.WeightShape[1] != 256 {
		t.Fatalf("grouped as %s, %d bits, group %d, shape %v; want int8, group 64, [48 256]", m.Format, m.Bits, m.GroupSize, m.WeightShape)
	}
	if fs := CheckModules([]*Module{m}, s); len(fs) != 0 {
		t.Fatalf("findings on a valid module: %+v", fs)
	}
	got := decodesAs(t, mem, m, &Scheme{Method: "gptq", Bits: 8, GroupSize: 64, CheckpointFormat: "gptq", Symmetric: s.Symmetric}, "the base config saying 8 bits")
	// and close to the weight it was quantized from (8 bits, group 64)
	for i, v := range w.Data {
		if math.Abs(float64(got[i]-v)) > 0.002 {
			t.Fatalf("value %d decoded %v from %v", i, got[i], v)
		}
	}
	base := Group(mem.infos(), &Scheme{Method: "gptq", Bits: 4, GroupSize: 128, CheckpointFormat: "gptq"}, nil)[0]
	if base.WeightShape[1] == 256 {
		t.Fatal("the base config reads the module's shape right too: the test shows nothing")
	}
}

// A dynamic object that cannot be what GPT-QModel wrote is refused, naming
// the file and the pattern's field.
func TestDynamicRejects(t *testing.T) {
	for _, c := range []struct{ dynamic, field, msg string }{
		{`{"(": {"bits": 8}}`, `quantization_config.dynamic["("]`, "no regular expression"},
		{`{".*": {"bits": 5}}`, `quantization_config.dynamic[".*"]`, "bits 5"},
		{`{".*": {"bits": "8"}}`, `quantization_config.dynamic[".*"].bits`, "integer"},
		{`{".*": {"group_size": -2}}`, `quantization_config.dynamic[".*"]`, "group_size -2"},
		{`{".*": 8}`, `quantization_config.dynamic[".*"]`, "object of overrides"},
		{`["x"]`, `quantization_config.dynamic`, "object of pattern"},
	} {
		_, err := Detect(gptqConfig(c.dynamic), nil)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.File != "config.json" || ce.Field != c.field || !strings.Contains(ce.Msg, c.msg) {
			t.Errorf("dynamic %s: got %v, want a ConfigError at %s saying %q", c.dynamic, err, c.field, c.msg)
		}
	}
	// gptq_p stores 2..8 bits: 6 is fine there.
	if _, err := Detect([]byte(`{"quantization_config":{"quant_method":"gptq","bits":4,"checkpoint_format":"gptq_p","dynamic":{".*":{"bits":6}}}}`), nil); err != nil {
		t.Errorf("gptq_p with a 6-bit rule: %v", err)
	}
}

// GPT-QModel tries every "-" rule before the others, wherever the file
// writes it; a "-" rule's overrides are not checked (they say nothing).
func TestDynamicNegativeFirst(t *testing.T) {
	s, err := Detect(gptqConfig(`{"+:.*": {"bits": 8}, "-:.*o_proj": {"bits": 5}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := s.DynamicFor("model.layers.0.self_attn.o_proj"); !p.Skip {
		t.Errorf("o_proj: %+v, want left unquantized by the - rule written second", p)
	}
	if p := s.DynamicFor("model.layers.0.self_attn.q_proj"); p.Skip || p.Bits != 8 {
		t.Errorf("q_proj: %+v, want 8 bits", p)
	}
}

// Overrides that would pack a module otherwise than the base config are
// refused, naming the field, rather than read as the base's packing.
func TestDynamicPackingOverrides(t *testing.T) {
	awq := func(dyn string) []byte {
		return []byte(`{"quantization_config":{"quant_method":"awq","bits":4,"group_size":128,"version":"gemm","dynamic":` + dyn + `}}`)
	}
	for _, c := range []struct {
		config []byte
		msg    string
	}{
		{awq(`{".*down_proj": {"bits": 8}}`), "AWQ packs 4 bits only"},
		{awq(`{".*down_proj": {"format": "gemv"}}`), `format "gemv" differs`},
		{gptqConfig(`{".*down_proj": {"pack_dtype": "int16"}}`), `pack_dtype "int16" differs`},
		{gptqConfig(`{".*down_proj": {"format": "gptq_v2"}}`), `format "gptq_v2" differs`},
		{gptqConfig(`{".*down_proj": {"group_size": 0}}`), "group_size 0"},
		{[]byte(`{"quantization_config":{"quant_method":"fp8","fmt":"e4m3","dynamic":{".*":{"weight_scale_semantics":"multiply"}}}}`), "weight_scale_semantics"},
	} {
		_, err := Detect(c.config, nil)
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(ce.Msg, c.msg) || !strings.HasPrefix(ce.Field, "quantization_config.dynamic[") {
			t.Errorf("%s: got %v, want a ConfigError at dynamic[…] saying %q", c.config, err, c.msg)
		}
	}
	// the base's own packing, repeated, is fine
	if _, err := Detect(awq(`{".*down_proj": {"format": "gemm", "bits": 4, "pack_dtype": "int32"}}`), nil); err != nil {
		t.Errorf("an AWQ rule repeating the base's packing: %v", err)
	}
}

// GPT-QModel's FP8 export may give a module its own weight_block_size: the
// module's blocks are those, not the base's nor a guess from the scale's
// shape (200×300 in 64×64 blocks has 4×5 scales, which a guess reads as
// 50×60 blocks).
func TestDynamicFP8Block(t *testing.T) {
	w := weights(23, 200, 300)
	mem := newMem(t, synth.FP8Block("model.layers.0.self_attn.q_proj", w, 64))
	s, err := Detect([]byte(`{"quantization_config":{"quant_method":"fp8","fmt":"e4m3","weight_block_size":[128,128],
		"dynamic":{"-:.*down_proj":{},".*q_proj":{"weight_block_size":[64,64]}}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := Group(mem.infos(), s, nil)[0]
	if len(m.Block) != 2 || m.Block[0] != 64 || m.Block[1] != 64 {
		t.Fatalf("block %v, want the rule's [64 64]", m.Block)
	}
	decodesAs(t, mem, m, &Scheme{Method: "fp8", Family: FamilyFP8, FP8Format: "e4m3", WeightBlockSize: []int{64, 64}}, "the base saying 64×64")
	if q, known := s.Declared(&Module{Name: "model.layers.0.mlp.down_proj", Kind: "mlp", Format: "bf16", WeightShape: []uint64{8, 8}}); q || !known {
		t.Errorf("down_proj under -:.*down_proj in an FP8 config declared (%v, %v)", q, known)
	}
}

// decodesAs decodes module m of mem and checks it bit for bit against the
// same tensors grouped under plain (a base config saying what a dynamic
// rule said); it returns m's values.
func decodesAs(t *testing.T, mem *memFile, m *Module, plain *Scheme, what string) []float32 {
	t.Helper()
	rows, _ := m.Matrix2D()
	got, err := Dequantize(m, mem, 0, int(rows))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Dequantize(Group(mem.infos(), plain, nil)[0], mem, 0, int(rows))
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("value %d = %v, with %s %v", i, got[i], what, want[i])
		}
	}
	return got
}
