package scheme

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/synth"
)

func TestDetect(t *testing.T) {
	cases := []struct {
		name           string
		config, hfq    string
		method, family string
		check          func(*Scheme) bool
	}{
		{"unquantized", `{"model_type":"llama"}`, "", "none", FamilyNone, nil},
		{"modelopt nested", "", `{"producer":{"name":"modelopt","version":"0.29.0"},"quantization":{"quant_algo":"NVFP4","kv_cache_quant_algo":"FP8","group_size":16,"exclude_modules":["lm_head","*.mlp.gate"]}}`,
			"modelopt", FamilyNVFP4, func(s *Scheme) bool {
				return s.Producer == "modelopt 0.29.0" && s.KVCache == "FP8" && len(s.ExcludeModules) == 2 && s.GroupSize == 16
			}},
		{"modelopt flat in config.json", `{"quantization_config":{"quant_method":"modelopt","quant_algo":"FP8","exclude_modules":["lm_head"]}}`, "", "modelopt", FamilyFP8, nil},
		{"modelopt nested in config.json", `{"quantization_config":{"quant_method":"modelopt","quantization":{"quant_algo":"MXFP8"}}}`, "", "modelopt", FamilyMXFP8, nil},
		{"modelopt mixed", "", `{"quantization":{"quant_algo":"MIXED_PRECISION","quantized_layers":{"model.layers.0.mlp.down_proj":{"quant_algo":"FP8"},"model.layers.1.mlp.down_proj":{"quant_algo":"NVFP4","group_size":16}}}}`,
			"modelopt", FamilyMixed, func(s *Scheme) bool { return s.QuantizedLayers["model.layers.1.mlp.down_proj"].QuantAlgo == "NVFP4" }},
		{"modelopt w4a16 awq", "", `{"quantization":{"quant_algo":"W4A16_AWQ","group_size":128}}`, "modelopt", FamilyInt, nil},
		{"modelopt nvfp4 awq", "", `{"quantization":{"quant_algo":"NVFP4_AWQ"}}`, "modelopt", FamilyNVFP4, nil},
		{"modelopt per channel", "", `{"quantization":{"quant_algo":"FP8_PER_CHANNEL_PER_TOKEN"}}`, "modelopt", FamilyFP8, nil},
		{"modelopt w4a16 nvfp4", "", `{"quantization":{"quant_algo":"W4A16_NVFP4"}}`, "modelopt", FamilyNVFP4, nil},
		{"ct nvfp4", `{"quantization_config":{"quant_method":"compressed-tensors","format":"nvfp4-pack-quantized","config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":4,"type":"float","strategy":"tensor_group","group_size":16,"symmetric":true}}},"ignore":["lm_head"]}}`,
			"", "compressed-tensors", FamilyNVFP4, func(s *Scheme) bool { return s.Bits == 4 && s.GroupSize == 16 && s.Ignore[0] == "lm_head" }},
		{"ct mxfp4", `{"quantization_config":{"quant_method":"compressed-tensors","format":"mxfp4-pack-quantized"}}`, "", "compressed-tensors", FamilyMXFP4, nil},
		{"ct int pack", `{"quantization_config":{"quant_method":"compressed-tensors","format":"pack-quantized","version":"0.17.1","config_groups":{"g":{"targets":["re:.*proj$"],"weights":{"num_bits":3,"type":"int","strategy":"group","group_size":128}}}}}`,
			"", "compressed-tensors", FamilyInt, func(s *Scheme) bool { return s.Bits == 3 && s.Version == "0.17.1" }},
		{"ct marlin", `{"quantization_config":{"quant_method":"compressed-tensors","format":"marlin-24"}}`, "", "compressed-tensors", FamilyInt, nil},
		{"ct naive", `{"quantization_config":{"quant_method":"compressed-tensors","format":"naive-quantized"}}`, "", "compressed-tensors", FamilyInt, nil},
		{"ct int-quantized", `{"quantization_config":{"quant_method":"compressed-tensors","format":"int-quantized"}}`, "", "compressed-tensors", FamilyInt, nil},
		{"ct float", `{"quantization_config":{"quant_method":"compressed-tensors","format":"float-quantized","kv_cache_scheme":{"num_bits":8,"type":"float"}}}`, "", "compressed-tensors", FamilyFP8,
			func(s *Scheme) bool { return s.KVCache == "float8" }},
		{"ct mixed", `{"quantization_config":{"quant_method":"compressed-tensors","format":"mixed-precision","config_groups":{"a":{"targets":["re:.*mlp.*"],"format":"nvfp4-pack-quantized","weights":{"num_bits":4,"type":"float","group_size":16}},"b":{"targets":["re:.*attn.*"],"format":"float-quantized","weights":{"num_bits":8,"type":"float"}}}}}`,
			"", "compressed-tensors", FamilyMixed, nil},
		{"ct mixed one family", `{"quantization_config":{"quant_method":"compressed-tensors","format":"mixed-precision","config_groups":{"a":{"targets":["Linear"],"weights":{"num_bits":4,"type":"int","group_size":128}}}}}`,
			"", "compressed-tensors", FamilyInt, nil},
		{"ct dense", `{"quantization_config":{"quant_method":"compressed-tensors","format":"dense"}}`, "", "compressed-tensors", FamilyNone, nil},
		{"ct older compression_config", `{"compression_config":{"quant_method":"compressed-tensors","format":"float-quantized"}}`, "", "compressed-tensors", FamilyFP8, nil},
		{"deepseek fp8", `{"quantization_config":{"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[128,128]}}`, "", "fp8", FamilyFP8,
			func(s *Scheme) bool { return s.WeightBlockSize[0] == 128 && s.FP8Format == "e4m3" }},
		{"fp8 per tensor alias", `{"quantization_config":{"quant_method":"fp8","fmt":"float8_e4m3fn","weight_block_size":null}}`, "", "fp8", FamilyFP8,
			func(s *Scheme) bool { return s.WeightBlockSize == nil && s.FP8Format == "e4m3" }},
		{"gptqmodel fp8", `{"quantization_config":{"quant_method":"fp8","fmt":"e4m3","quantizer":["gptqmodel:5.0.0"]}}`, "", "fp8", FamilyFP8,
			func(s *Scheme) bool { return s.InverseFP8Scales }},
		{"gptq", `{"quantization_config":{"quant_method":"gptq","bits":4,"group_size":128,"sym":true,"desc_act":true}}`, "", "gptq", FamilyInt,
			func(s *Scheme) bool { return s.CheckpointFormat == "gptq" && s.DescAct && *s.Symmetric }},
		{"gptq v2", `{"quantization_config":{"quant_method":"gptq","bits":3,"group_size":-1,"checkpoint_format":"gptq_v2"}}`, "", "gptq", FamilyInt,
			func(s *Scheme) bool { return s.CheckpointFormat == "gptq_v2" && s.GroupSize == -1 }},
		{"awq", `{"quantization_config":{"quant_method":"awq","bits":4,"group_size":128,"version":"gemm"}}`, "", "awq", FamilyInt, func(s *Scheme) bool { return s.Format == "gemm" }},
		{"awq old names", `{"quantization_config":{"quant_method":"awq","w_bit":4,"q_group_size":64}}`, "", "awq", FamilyInt, func(s *Scheme) bool { return s.GroupSize == 64 }},
		{"mxfp4", `{"quantization_config":{"quant_method":"mxfp4","modules_to_not_convert":["lm_head"]}}`, "", "mxfp4", FamilyMXFP4, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var cfg, hfq []byte
			if c.config != "" {
				cfg = []byte(c.config)
			}
			if c.hfq != "" {
				hfq = []byte(c.hfq)
			}
			s, err := Detect(cfg, hfq)
			if err != nil {
				t.Fatal(err)
			}
			if s.Method != c.method || s.Family != c.family {
				t.Fatalf("method %q family %q, want %q %q", s.Method, s.Family, c.method, c.family)
			}
			if c.check != nil && !c.check(s) {
				t.Fatalf("details wrong: %+v", s)
			}
		})
	}
}

func TestFP8Aliases(t *testing.T) {
	for alias, want := range map[string]string{
		"e4m3": "e4m3", "float8_e4m3": "e4m3", "float8_e4m3fn": "e4m3", "E4M3": "e4m3",
		"e5m2": "e5m2", "float8_e5m2": "e5m2", "e4m3fnuz": "e4m3fnuz", "float8_e4m3fnuz": "e4m3fnuz",
		"e5m2fnuz": "e5m2fnuz", "float8_e5m2fnuz": "e5m2fnuz", "e8m0": "e8m0", "e8m0fnu": "e8m0",
		"float8_e8m0fnu": "e8m0", "int8": "",
	} {
		if got := NormalizeFP8Format(alias); got != want {
			t.Errorf("%q -> %q, want %q", alias, got, want)
		}
	}
}

func TestDetectRejects(t *testing.T) {
	for name, c := range map[string]struct{ config, hfq, field, file string }{
		"not json":         {config: `{"quantization_config":`, file: "config.json"},
		"not an object":    {config: `[1]`, file: "config.json"},
		"qc not object":    {config: `{"quantization_config":"fp8"}`, field: "quantization_config", file: "config.json"},
		"num_bits 9":       {config: `{"quantization_config":{"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":9,"type":"int"}}}}}`, field: "quantization_config.config_groups.g.weights.num_bits", file: "config.json"},
		"num_bits 0":       {config: `{"quantization_config":{"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":0,"type":"int"}}}}}`, field: "quantization_config.config_groups.g.weights.num_bits", file: "config.json"},
		"bits string":      {config: `{"quantization_config":{"quant_method":"gptq","bits":"4"}}`, field: "quantization_config.bits", file: "config.json"},
		"gptq bits 5":      {config: `{"quantization_config":{"quant_method":"gptq","bits":5}}`, field: "quantization_config.bits", file: "config.json"},
		"bad strategy":     {config: `{"quantization_config":{"quant_method":"compressed-tensors","config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":4,"strategy":"rows"}}}}}`, field: "quantization_config.config_groups.g.weights.strategy", file: "config.json"},
		"bad fp8 fmt":      {config: `{"quantization_config":{"quant_method":"fp8","fmt":"e3m4"}}`, field: "quantization_config.fmt", file: "config.json"},
		"bad block":        {config: `{"quantization_config":{"quant_method":"fp8","weight_block_size":[128]}}`, field: "quantization_config.weight_block_size", file: "config.json"},
		"targets not list": {config: `{"quantization_config":{"quant_method":"compressed-tensors","config_groups":{"g":{"targets":"Linear"}}}}`, field: "quantization_config.config_groups.g.targets", file: "config.json"},
		"no quant_algo":    {hfq: `{"quantization":{"group_size":16}}`, field: "quantization.quant_algo", file: "hf_quant_config.json"},
		"exclude not list": {hfq: `{"quantization":{"quant_algo":"NVFP4","exclude_modules":"lm_head"}}`, field: "quantization.exclude_modules", file: "hf_quant_config.json"},
		"hfq not json":     {hfq: `{`, file: "hf_quant_config.json"},
		"no method":        {config: `{"quantization_config":{"bits":4}}`, field: "quantization_config.quant_method", file: "config.json"},
	} {
		t.Run(name, func(t *testing.T) {
			var cfg, hfq []byte
			if c.config != "" {
				cfg = []byte(c.config)
			}
			if c.hfq != "" {
				hfq = []byte(c.hfq)
			}
			_, err := Detect(cfg, hfq)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a ConfigError", err)
			}
			if ce.File != c.file || ce.Field != c.field {
				t.Fatalf("file %q field %q (%v), want %q %q", ce.File, ce.Field, err, c.file, c.field)
			}
			if !strings.Contains(err.Error(), c.file) {
				t.Fatalf("message %q does not name the file", err)
			}
		})
	}
	var ue *UnsupportedError
	if _, err := Detect([]byte(`{"quantization_config":{"quant_method":"bitsandbytes"}}`), nil); !errors.As(err, &ue) {
		t.Fatalf("unknown method: %v", err)
	}
	if _, err := Detect(nil, []byte(`{"quantization":{"quant_algo":"INT2_MAGIC"}}`)); !errors.As(err, &ue) {
		t.Fatalf("unknown algo: %v", err)
	}
}

// FuzzDetect: any pair of config files either yields a scheme or an error,
// never a panic.
func FuzzDetect(f *testing.F) {
	f.Add([]byte(`{"quantization_config":{"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":{"g":{"targets":["re:.*"],"weights":{"num_bits":4,"type":"int","strategy":"group","group_size":128}}},"ignore":["lm_head"]}}`), []byte(nil))
	f.Add([]byte(`{"quantization_config":{"quant_method":"fp8","fmt":"e4m3","weight_block_size":[128,128]}}`), []byte(nil))
	f.Add([]byte(nil), []byte(`{"producer":{"name":"modelopt"},"quantization":{"quant_algo":"MIXED_PRECISION","quantized_layers":{"a":{"quant_algo":"FP8"}}}}`))
	f.Add([]byte(`{"quantization_config":{"quant_method":"gptq","bits":4,"group_size":128,"sym":true}}`), []byte(nil))
	f.Add([]byte(`{"quantization_config":{"quant_method":"gptq","bits":4,"group_size":128,"dynamic":{"+:.*\.(?!0\.)down_proj":{"bits":8,"group_size":64},"-:lm_head":{},".*":{"sym":false}}}}`), []byte(nil))
	f.Fuzz(func(t *testing.T, cfg, hfq []byte) {
		if len(hfq) == 0 {
			hfq = nil // the corpus files cannot spell nil: "" is no hf_quant_config.json
		}
		s, err := Detect(cfg, hfq)
		if err == nil && (s == nil || s.Family == "") {
			t.Fatal("nil scheme without error")
		}
		if err == nil { // the dynamic rules match any name without failing
			s.DynamicFor("model.layers.1.mlp.down_proj")
			s.DynamicFor("")
		}
		if err != nil && s != nil {
			t.Fatal("scheme and error together")
		}
	})
}

// What a config says of a module: exclusions are fnmatch wildcards for
// ModelOpt, names or re: patterns for compressed-tensors; MoE routers are
// unquantized by the runtimes whatever the targets say.
func TestDeclared(t *testing.T) {
	lin := func(name string) *Module {
		return &Module{Name: name, Kind: kindOf(name), Format: "bf16", WeightShape: []uint64{8, 8}}
	}
	mo := &Scheme{Method: "modelopt", QuantAlgo: "NVFP4", ExcludeModules: []string{"lm_head", "model.layers.*.self_attn*"}}
	ct := &Scheme{Method: "compressed-tensors", Ignore: []string{"lm_head", "re:.*o_proj$"}, Groups: []ConfigGroup{{Targets: []string{"Linear"}}}}
	for _, c := range []struct {
		s              *Scheme
		name           string
		declared, know bool
	}{
		{mo, "model.layers.3.mlp.experts.7.up_proj", true, true},
		{mo, "model.layers.3.self_attn.q_proj", false, true},
		{mo, "lm_head", false, true},
		{mo, "model.layers.3.mlp.gate", false, false},
		{ct, "model.layers.0.self_attn.o_proj", false, true},
		{ct, "model.layers.0.self_attn.q_proj", true, true},
		{ct, "model.layers.0.mlp.router", false, false},
		{&Scheme{Method: "mxfp4", Ignore: []string{"model.layers.*.mlp.router"}}, "model.layers.1.mlp.router", false, true},
		{&Scheme{Method: "fp8"}, "model.layers.1.mlp.down_proj", true, false},
		{&Scheme{Method: "none"}, "model.layers.1.mlp.down_proj", false, false},
	} {
		d, k := c.s.Declared(lin(c.name))
		if d != c.declared || k != c.know {
			t.Errorf("%s %s: declared %v known %v, want %v %v", c.s.Method, c.name, d, k, c.declared, c.know)
		}
	}
}

// GPT-QModel's gptq_p (planar) checkpoints store 2-, 4- and 8-bit words as
// gptq does with v2's zero points (as stored, no +1): decoded as gptq_v2.
// At 3, 5, 6 and 7 bits the codes are split into bit planes: layout gptq_p
// (TestGPTQPlanarModule decodes it). 5 bits outside gptq_p, and a
// checkpoint_format nobody defined (its zero points and packing cannot be
// assumed), are refused by rule.
func TestGPTQCheckpointFormats(t *testing.T) {
	w := weights(3, 16, 256)
	for _, c := range []struct {
		format string
		bits   int
		layout string
		err    string
	}{
		{"gptq", 4, LayoutGPTQ, ""},
		{"gptq_v2", 4, LayoutGPTQv2, ""},
		{"gptq_p", 4, LayoutGPTQv2, ""},
		{"gptq_p", 8, LayoutGPTQv2, ""},
		{"gptq_p", 3, LayoutGPTQp, ""},
		{"gptq_p", 5, LayoutGPTQp, ""},
		{"gptq", 5, "", "GPT-QModel writes 5, 6 and 7 bits as checkpoint_format gptq_p"},
		{"marlin", 4, "", `unknown GPTQ checkpoint_format "marlin"`},
	} {
		cfg := fmt.Sprintf(`{"quantization_config":{"quant_method":"gptq","bits":%d,"group_size":128,"sym":false,"checkpoint_format":%q}}`, c.bits, c.format)
		s, err := Detect([]byte(cfg), nil)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s %d-bit: %v, want an error saying %q", c.format, c.bits, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.format, err)
		}
		var ts []safetensors.WriteTensor
		if c.bits == 5 { // the continuous packer has no 5 bits; the layout is the config's to say
			ts = []safetensors.WriteTensor{{Name: "m.qweight", DType: safetensors.I32, Shape: []uint64{256 * 5 / 32, 16}, Data: make([]byte, 4*40*16)},
				{Name: "m.qzeros", DType: safetensors.I32, Shape: []uint64{2, 16 * 5 / 32}, Data: make([]byte, 4*2*2)},
				{Name: "m.scales", DType: safetensors.F16, Shape: []uint64{2, 16}, Data: make([]byte, 2*2*16)}}
		} else {
			ts = synth.GPTQ("m", w, c.bits, 128)
		}
		mem := newMem(t, ts)
		if m := Group(mem.infos(), s, nil)[0]; m.Layout != c.layout {
			t.Errorf("%s %d-bit: layout %s, want %s", c.format, c.bits, m.Layout, c.layout)
		}
	}
}

// ModelOpt's config.json form lists the unquantized modules as "ignore"
// (vLLM reads it so); an AWQ version other than gemm packs otherwise and
// is refused rather than read as gemm.
func TestModelOptIgnoreAndAWQVersion(t *testing.T) {
	s, err := Detect([]byte(`{"quantization_config":{"quant_method":"modelopt","quant_algo":"FP8","ignore":["lm_head","model.layers.0.*"]}}`), nil)
	if err != nil || !slices.Equal(s.ExcludeModules, []string{"lm_head", "model.layers.0.*"}) || s.ExcludedBy("lm_head") != "lm_head" {
		t.Errorf("modelopt ignore: %+v, %v", s, err)
	}
	if _, err := Detect([]byte(`{"quantization_config":{"quant_method":"awq","bits":4,"group_size":128,"version":"gemv"}}`), nil); err == nil || !strings.Contains(err.Error(), `AWQ version "gemv"`) {
		t.Errorf("awq gemv: %v", err)
	}
}
