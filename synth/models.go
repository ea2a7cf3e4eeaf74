package synth

import (
	"fmt"
	"strings"

	"github.com/quantscope/quantscope/formats/packing"
	st "github.com/quantscope/quantscope/formats/safetensors"
)

// Org is the demo hub's organisation for generated repos.
const Org = "quantscope-demo"

// llamaDims is a Llama-shaped decoder small enough to generate in milliseconds
// but wide enough for 128-wide groups and blocks.
type llamaDims struct {
	hidden, inter, layers, vocab, heads, kvHeads int
}

var tinyLlama = llamaDims{hidden: 256, inter: 768, layers: 2, vocab: 256, heads: 4, kvHeads: 2}

// linearFn stores one linear layer and names its stored format.
type linearFn func(name string, m Matrix) ([]st.WriteTensor, string)

func (b *builder) record(name string, m Matrix, format string) {
	b.repo.Weights[name] = m
	b.repo.Formats[name] = format
}

func (b *builder) dense(name string, m Matrix) {
	b.add(Dense(name+".weight", m)...)
	b.record(name, m, "bf16")
}

func (b *builder) linear(name string, m Matrix, q linearFn) {
	ts, format := q(name, m)
	b.add(ts...)
	b.record(name, m, format)
}

// llama writes a Llama decoder; q decides how each linear of the decoder
// layers is stored (embeddings, norms and lm_head stay BF16 unless q is
// asked for lm_head by head).
func (b *builder) llama(seed uint64, d llamaDims, q linearFn, head linearFn) {
	r := rng(seed)
	hd := d.hidden / d.heads
	b.dense("model.embed_tokens", randomMatrix(r, []uint64{uint64(d.vocab), uint64(d.hidden)}, 0.02))
	for l := range d.layers {
		if len(b.shards) > 1 {
			b.shard(l * len(b.shards) / d.layers)
		}
		p := fmt.Sprintf("model.layers.%d.", l)
		b.dense(p+"input_layernorm", normWeight(r, uint64(d.hidden)))
		b.dense(p+"post_attention_layernorm", normWeight(r, uint64(d.hidden)))
		for _, lin := range []struct {
			name    string
			out, in int
		}{
			{"self_attn.q_proj", d.heads * hd, d.hidden},
			{"self_attn.k_proj", d.kvHeads * hd, d.hidden},
			{"self_attn.v_proj", d.kvHeads * hd, d.hidden},
			{"self_attn.o_proj", d.hidden, d.heads * hd},
			{"mlp.gate_proj", d.inter, d.hidden},
			{"mlp.up_proj", d.inter, d.hidden},
			{"mlp.down_proj", d.hidden, d.inter},
		} {
			b.linear(p+lin.name, randomMatrix(r, []uint64{uint64(lin.out), uint64(lin.in)}, 0.02), q)
		}
	}
	b.dense("model.norm", normWeight(r, uint64(d.hidden)))
	headW := randomMatrix(r, []uint64{uint64(d.vocab), uint64(d.hidden)}, 0.02)
	if head != nil {
		b.linear("lm_head", headW, head)
	} else {
		b.dense("lm_head", headW)
	}
}

func llamaConfig(d llamaDims, qc map[string]any) map[string]any {
	c := map[string]any{
		"architectures":       []string{"LlamaForCausalLM"},
		"model_type":          "llama",
		"hidden_size":         d.hidden,
		"intermediate_size":   d.inter,
		"num_hidden_layers":   d.layers,
		"num_attention_heads": d.heads,
		"num_key_value_heads": d.kvHeads,
		"vocab_size":          d.vocab,
		"rms_norm_eps":        1e-5,
		"torch_dtype":         "bfloat16",
	}
	if qc != nil {
		c["quantization_config"] = qc
	}
	return c
}

func modelOptNVFP4(s2 st.DType) linearFn {
	return func(name string, m Matrix) ([]st.WriteTensor, string) {
		dt := st.F32
		if s2 == st.BF16 && (strings.HasSuffix(name, "o_proj") || strings.HasSuffix(name, "down_proj")) {
			dt = st.BF16
		}
		return NVFP4ModelOpt(name, m, 4, dt), "nvfp4"
	}
}

// ModelOptNVFP4 is a ModelOpt NVFP4 export with hf_quant_config.json and the
// newer config.json quantization_config.
func ModelOptNVFP4() *Repo {
	b := newBuilder(Org+"/Llama-tiny-NVFP4", "ModelOpt NVFP4 export (hf_quant_config.json), Llama-shaped", 1)
	b.llama(101, tinyLlama, modelOptNVFP4(st.F32), nil)
	q := map[string]any{"quant_algo": "NVFP4", "kv_cache_quant_algo": nil, "group_size": 16, "exclude_modules": []string{"lm_head"}}
	b.json("hf_quant_config.json", map[string]any{"producer": map[string]any{"name": "modelopt", "version": "0.29.0"}, "quantization": q})
	b.json("config.json", llamaConfig(tinyLlama, map[string]any{"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": []string{"lm_head"}}))
	return b.finish(1)
}

// ModelOptAWQ is a ModelOpt INT4 AWQ export (W4A16_AWQ, group 128): U8
// weights holding pairs of output rows, float32 group scales.
func ModelOptAWQ() *Repo {
	b := newBuilder(Org+"/Llama-tiny-W4A16-AWQ-modelopt", "ModelOpt INT4 AWQ export (W4A16_AWQ, hf_quant_config.json), Llama-shaped", 1)
	pqs := rng(1109)
	b.llama(109, tinyLlama, func(name string, m Matrix) ([]st.WriteTensor, string) {
		// ModelOpt's HF export folds the pre_quant_scale of q/k/v and
		// gate/up into the norm before them; o_proj and down_proj, with no
		// norm before them, keep theirs.
		if strings.HasSuffix(name, "o_proj") || strings.HasSuffix(name, "down_proj") {
			return ModelOptAWQInt4PreQuant(name, m, 128, pqs), "int4"
		}
		return ModelOptAWQInt4(name, m, 128), "int4"
	}, nil)
	q := map[string]any{"quant_algo": "W4A16_AWQ", "kv_cache_quant_algo": nil, "group_size": 128, "exclude_modules": []string{"lm_head"}}
	b.json("hf_quant_config.json", map[string]any{"producer": map[string]any{"name": "modelopt", "version": "0.29.0"}, "quantization": q})
	b.json("config.json", llamaConfig(tinyLlama, map[string]any{"quant_method": "modelopt", "quant_algo": "W4A16_AWQ", "group_size": 128, "exclude_modules": []string{"lm_head"}}))
	return b.finish(1)
}

// CTNVFP4 is compressed-tensors nvfp4-pack-quantized.
func CTNVFP4() *Repo {
	b := newBuilder(Org+"/Llama-tiny-NVFP4-ct", "compressed-tensors nvfp4-pack-quantized, Llama-shaped", 1)
	b.llama(102, tinyLlama, func(name string, m Matrix) ([]st.WriteTensor, string) { return NVFP4CT(name, m, 4), "nvfp4" }, nil)
	b.json("config.json", llamaConfig(tinyLlama, map[string]any{
		"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "version": "0.12.2",
		"config_groups": map[string]any{"group_0": map[string]any{
			"targets":           []string{"Linear"},
			"weights":           map[string]any{"num_bits": 4, "type": "float", "symmetric": true, "strategy": "tensor_group", "group_size": 16},
			"input_activations": map[string]any{"num_bits": 4, "type": "float", "symmetric": true, "strategy": "tensor_group", "group_size": 16, "dynamic": "local"},
		}},
		"ignore": []string{"lm_head"},
	}))
	return b.finish(1)
}

func ctPackConfig(version string, bits, group int, sym bool) map[string]any {
	return map[string]any{
		"quant_method": "compressed-tensors", "format": "pack-quantized", "version": version,
		"config_groups": map[string]any{"group_0": map[string]any{
			"targets": []string{"Linear"},
			"weights": map[string]any{"num_bits": bits, "type": "int", "symmetric": sym, "strategy": "group", "group_size": group, "actorder": nil},
		}},
		"ignore": []string{"lm_head"},
	}
}

// CTW4A16 is compressed-tensors pack-quantized int4, symmetric, group 128.
func CTW4A16() *Repo {
	b := newBuilder(Org+"/Llama-tiny-W4A16", "compressed-tensors pack-quantized INT4 W4A16, group 128", 1)
	b.llama(103, tinyLlama, func(name string, m Matrix) ([]st.WriteTensor, string) {
		return CTPack(name, m, 4, 128, true, packing.CTBitstream), "int4"
	}, nil)
	b.json("config.json", llamaConfig(tinyLlama, ctPackConfig("0.18.0", 4, 128, true)))
	return b.finish(1)
}

// CTW3A16Legacy is 3-bit asymmetric pack-quantized written by
// compressed-tensors 0.17 (the per-word layout), with packed zero points.
func CTW3A16Legacy() *Repo {
	b := newBuilder(Org+"/Llama-tiny-W3A16-asym-ct017", "compressed-tensors 0.17 pack-quantized INT3, asymmetric (per-word layout, zero points)", 1)
	b.llama(104, tinyLlama, func(name string, m Matrix) ([]st.WriteTensor, string) {
		return CTPack(name, m, 3, 128, false, packing.CTPerWord), "int3"
	}, nil)
	b.json("config.json", llamaConfig(tinyLlama, ctPackConfig("0.17.1", 3, 128, false)))
	return b.finish(1)
}

// CTFP8Dynamic is compressed-tensors float-quantized FP8 with channel scales.
func CTFP8Dynamic() *Repo {
	b := newBuilder(Org+"/Llama-tiny-FP8-Dynamic", "compressed-tensors float-quantized FP8, channel scales, dynamic activations", 1)
	b.llama(105, tinyLlama, func(name string, m Matrix) ([]st.WriteTensor, string) { return FP8Channel(name, m), "fp8" }, nil)
	b.json("config.json", llamaConfig(tinyLlama, map[string]any{
		"quant_method": "compressed-tensors", "format": "float-quantized", "version": "0.18.0",
		"config_groups": map[string]any{"group_0": map[string]any{
			"targets":           []string{"Linear"},
			"weights":           map[string]any{"num_bits": 8, "type": "float", "symmetric": true, "strategy": "channel"},
			"input_activations": map[string]any{"num_bits": 8, "type": "float", "symmetric": true, "strategy": "token", "dynamic": true},
		}},
		"ignore": []string{"lm_head"},
	}))
	return b.finish(1)
}

// GPTQInt4 is a GPT-QModel/AutoGPTQ v1 export, asymmetric, group 128.
func GPTQInt4() *Repo {
	b := newBuilder(Org+"/Llama-tiny-GPTQ-Int4", "GPTQ INT4 (v1 checkpoint_format), group 128, asymmetric", 1)
	b.llama(106, tinyLlama, func(name string, m Matrix) ([]st.WriteTensor, string) { return GPTQ(name, m, 4, 128), "int4" }, nil)
	b.json("config.json", llamaConfig(tinyLlama, map[string]any{
		"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": false, "desc_act": false,
		"checkpoint_format": "gptq", "damp_percent": 0.01, "true_sequential": true,
	}))
	return b.finish(1)
}

// GPTQDynamic is a GPT-QModel export with per-module overrides
// (quantization_config.dynamic): INT4 group 128 by default, every down_proj
// INT8 group 64, and layer 1's o_proj left BF16 by a "-:" rule. Read with
// the base config alone, the down_proj shapes come out wrong.
func GPTQDynamic() *Repo {
	b := newBuilder(Org+"/Llama-tiny-GPTQ-dynamic", "GPT-QModel INT4 with dynamic overrides: down_proj INT8 group 64, layer 1 o_proj BF16", 1)
	b.llama(110, tinyLlama, func(name string, m Matrix) ([]st.WriteTensor, string) {
		switch {
		case name == "model.layers.1.self_attn.o_proj":
			return Dense(name+".weight", m), "bf16"
		case strings.HasSuffix(name, ".down_proj"):
			return GPTQ(name, m, 8, 64), "int8"
		}
		return GPTQ(name, m, 4, 128), "int4"
	}, nil)
	b.json("config.json", llamaConfig(tinyLlama, map[string]any{
		"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": false, "desc_act": false,
		"checkpoint_format": "gptq", "quantizer": []string{"gptqmodel:5.0.0"},
		// one key each way: the JSON writer sorts keys, and these two never
		// match the same module, so their order does not matter here
		"dynamic": map[string]any{
			`+:.*\.down_proj`:                       map[string]any{"bits": 8, "group_size": 64},
			`-:model\.layers\.1\.self_attn\.o_proj`: map[string]any{},
		},
	}))
	return b.finish(1)
}

// AWQInt4 is an AutoAWQ gemm export, group 128.
func AWQInt4() *Repo {
	b := newBuilder(Org+"/Llama-tiny-AWQ", "AutoAWQ gemm INT4, group 128", 1)
	b.llama(107, tinyLlama, func(name string, m Matrix) ([]st.WriteTensor, string) { return AWQ(name, m, 128), "int4" }, nil)
	b.json("config.json", llamaConfig(tinyLlama, map[string]any{
		"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true, "version": "gemm",
		"modules_to_not_convert": nil,
	}))
	return b.finish(1)
}

// DeepSeekFP8 is a DeepSeek-V3-shaped model (MLA attention, routed and shared
// experts) with 128×128 FP8 block scales, in two shards with an index.
func DeepSeekFP8() *Repo {
	b := newBuilder(Org+"/DeepSeek-tiny-FP8", "DeepSeek-V3-style FP8 128x128 blocks, MoE, 2 shards with index", 2)
	b.deepseek(108, func(name string, m Matrix) ([]st.WriteTensor, string) { return FP8Block(name, m, 128), "fp8" })
	b.json("config.json", map[string]any{
		"architectures": []string{"DeepseekV3ForCausalLM"}, "model_type": "deepseek_v3",
		"hidden_size": 256, "num_hidden_layers": 2, "n_routed_experts": 4, "n_shared_experts": 1,
		"moe_intermediate_size": 256, "intermediate_size": 512, "first_k_dense_replace": 1,
		"q_lora_rank": 256, "kv_lora_rank": 256, "qk_rope_head_dim": 64, "qk_nope_head_dim": 32, "v_head_dim": 64,
		"num_attention_heads": 2, "vocab_size": 256, "torch_dtype": "bfloat16",
		"quantization_config": map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": []int{128, 128}},
	})
	return b.finish(1)
}

func (b *builder) deepseek(seed uint64, q linearFn) {
	r := rng(seed)
	const hidden, vocab = 256, 256
	mat := func(out, in int) Matrix { return randomMatrix(r, []uint64{uint64(out), uint64(in)}, 0.02) }
	b.shard(0)
	b.dense("model.embed_tokens", mat(vocab, hidden))
	for l := range 2 {
		b.shard(l)
		p := fmt.Sprintf("model.layers.%d.", l)
		b.dense(p+"input_layernorm", normWeight(r, hidden))
		b.dense(p+"post_attention_layernorm", normWeight(r, hidden))
		b.dense(p+"self_attn.q_a_layernorm", normWeight(r, 256))
		b.dense(p+"self_attn.kv_a_layernorm", normWeight(r, 256))
		b.linear(p+"self_attn.q_a_proj", mat(256, hidden), q)
		b.linear(p+"self_attn.q_b_proj", mat(2*96, 256), q)
		b.linear(p+"self_attn.kv_a_proj_with_mqa", mat(256+64, hidden), q)
		b.linear(p+"self_attn.kv_b_proj", mat(2*(32+64), 256), q)
		b.linear(p+"self_attn.o_proj", mat(hidden, 2*64), q)
		if l == 0 {
			b.linear(p+"mlp.gate_proj", mat(512, hidden), q)
			b.linear(p+"mlp.up_proj", mat(512, hidden), q)
			b.linear(p+"mlp.down_proj", mat(hidden, 512), q)
			continue
		}
		b.dense(p+"mlp.gate", mat(4, hidden)) // the router stays BF16
		for e := range 4 {
			ep := fmt.Sprintf("%smlp.experts.%d.", p, e)
			b.linear(ep+"gate_proj", mat(256, hidden), q)
			b.linear(ep+"up_proj", mat(256, hidden), q)
			b.linear(ep+"down_proj", mat(hidden, 256), q)
		}
		b.linear(p+"mlp.shared_experts.gate_proj", mat(256, hidden), q)
		b.linear(p+"mlp.shared_experts.up_proj", mat(256, hidden), q)
		b.linear(p+"mlp.shared_experts.down_proj", mat(hidden, 256), q)
	}
	b.dense("model.norm", normWeight(r, hidden))
	b.dense("lm_head", mat(vocab, hidden))
}

// GPTOSSMXFP4 is a gpt-oss-shaped MoE with MXFP4 experts in transformers'
// naming (`*_blocks`, `*_scales`, `*_bias`) and BF16 attention.
func GPTOSSMXFP4() *Repo {
	b := newBuilder(Org+"/gpt-oss-tiny-MXFP4", "gpt-oss-style MXFP4 experts (_blocks/_scales), BF16 attention", 1)
	r := rng(109)
	const hidden, inter, experts, vocab, heads, kv, hd = 256, 512, 8, 256, 4, 2, 64
	mat := func(shape ...uint64) Matrix { return randomMatrix(r, shape, 0.02) }
	b.dense("model.embed_tokens", mat(vocab, hidden))
	for l := range 2 {
		p := fmt.Sprintf("model.layers.%d.", l)
		b.dense(p+"input_layernorm", normWeight(r, hidden))
		b.dense(p+"post_attention_layernorm", normWeight(r, hidden))
		for _, lin := range []struct {
			name    string
			out, in uint64
		}{{"q_proj", heads * hd, hidden}, {"k_proj", kv * hd, hidden}, {"v_proj", kv * hd, hidden}, {"o_proj", hidden, heads * hd}} {
			b.dense(p+"self_attn."+lin.name, mat(lin.out, lin.in))
			b.add(Dense(p+"self_attn."+lin.name+".bias", mat(lin.out))...)
		}
		b.add(Dense(p+"self_attn.sinks", mat(heads))...)
		b.dense(p+"mlp.router", mat(experts, hidden))
		b.add(Dense(p+"mlp.router.bias", mat(experts))...)
		gu := mat(experts, 2*inter, hidden)
		b.add(MXFP4(p+"mlp.experts.gate_up_proj", gu)...)
		b.add(Dense(p+"mlp.experts.gate_up_proj_bias", mat(experts, 2*inter))...)
		b.record(p+"mlp.experts.gate_up_proj", gu, "mxfp4")
		dn := mat(experts, hidden, inter)
		b.add(MXFP4(p+"mlp.experts.down_proj", dn)...)
		b.add(Dense(p+"mlp.experts.down_proj_bias", mat(experts, hidden))...)
		b.record(p+"mlp.experts.down_proj", dn, "mxfp4")
	}
	b.dense("model.norm", normWeight(r, hidden))
	b.dense("lm_head", mat(vocab, hidden))
	b.json("config.json", map[string]any{
		"architectures": []string{"GptOssForCausalLM"}, "model_type": "gpt_oss",
		"hidden_size": hidden, "intermediate_size": inter, "num_local_experts": experts, "num_hidden_layers": 2,
		"num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd, "vocab_size": vocab,
		"quantization_config": map[string]any{"quant_method": "mxfp4", "modules_to_not_convert": []string{
			"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
	})
	return b.finish(1)
}

// Mislabeled is a repo whose labels lie: an "FP4" ModelOpt config whose MLP
// is really BF16 (so most bytes are BF16), an exclude_modules entry naming a
// module that is in fact quantized, an index total_size twice the truth, and
// weight_scale_2 stored BF16 [1] in o_proj only.
func Mislabeled() *Repo {
	b := newBuilder(Org+"/Llama-tiny-FP4-mislabeled", "labels that lie: FP4 config, mostly BF16 bytes, wrong exclude list and index", 2)
	nv := modelOptNVFP4(st.BF16)
	b.llama(110, tinyLlama, func(name string, m Matrix) ([]st.WriteTensor, string) {
		if strings.HasSuffix(name, "_proj") && strings.Contains(name, ".mlp.") {
			return Dense(name+".weight", m), "bf16"
		}
		return nv(name, m)
	}, nil)
	q := map[string]any{"quant_algo": "NVFP4", "kv_cache_quant_algo": nil, "group_size": 16,
		"exclude_modules": []string{"lm_head", "model.layers.0.self_attn.q_proj"}}
	b.json("hf_quant_config.json", map[string]any{"producer": map[string]any{"name": "modelopt", "version": "0.27.1"}, "quantization": q})
	b.json("config.json", llamaConfig(tinyLlama, nil))
	return b.finish(2)
}

// All returns every demo repo, in a stable order.
func All() []*Repo {
	return []*Repo{ModelOptNVFP4(), ModelOptAWQ(), CTNVFP4(), CTW4A16(), CTW3A16Legacy(), CTFP8Dynamic(), GPTQInt4(), GPTQDynamic(), AWQInt4(), DeepSeekFP8(), GPTOSSMXFP4(), Mislabeled(),
		DeepSeekMiniFP8(), DeepSeekMiniNVFP4()}
}
