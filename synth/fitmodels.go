package synth

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	st "github.com/quantscope/quantscope/formats/safetensors"
)

// The repos below are shaped for `quantscope fit`'s tests: each carries the
// config.json fields a KV-cache estimate reads (head_dim, MLA ranks, an MTP
// layer, layer_types with a sliding window, a declared FP8 KV cache), with
// dimensions small enough to check every byte by hand.

// FitLlamaDims are FitLlamaGQA's dimensions: GQA with 2 KV heads of an
// explicit head_dim 48 (not hidden/heads = 32), all BF16.
var FitLlamaDims = struct{ Hidden, Inter, Layers, Vocab, Heads, KVHeads, HeadDim, MaxPos int }{128, 256, 3, 320, 4, 2, 48, 4096}

// FitLlamaGQA is a BF16 Llama-shaped repo with grouped-query attention and
// an explicit head_dim.
func FitLlamaGQA() *Repo {
	d := FitLlamaDims
	b := newBuilder(Org+"/Llama-fit-GQA", "Llama-shaped BF16, GQA 4 heads / 2 KV heads, head_dim 48", 1)
	r := rng(201)
	mat := func(out, in int) Matrix { return randomMatrix(r, []uint64{uint64(out), uint64(in)}, 0.02) }
	b.dense("model.embed_tokens", mat(d.Vocab, d.Hidden))
	for l := range d.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		b.dense(p+"input_layernorm", normWeight(r, uint64(d.Hidden)))
		b.dense(p+"post_attention_layernorm", normWeight(r, uint64(d.Hidden)))
		b.dense(p+"self_attn.q_proj", mat(d.Heads*d.HeadDim, d.Hidden))
		b.dense(p+"self_attn.k_proj", mat(d.KVHeads*d.HeadDim, d.Hidden))
		b.dense(p+"self_attn.v_proj", mat(d.KVHeads*d.HeadDim, d.Hidden))
		b.dense(p+"self_attn.o_proj", mat(d.Hidden, d.Heads*d.HeadDim))
		b.dense(p+"mlp.gate_proj", mat(d.Inter, d.Hidden))
		b.dense(p+"mlp.up_proj", mat(d.Inter, d.Hidden))
		b.dense(p+"mlp.down_proj", mat(d.Hidden, d.Inter))
	}
	b.dense("model.norm", normWeight(r, uint64(d.Hidden)))
	b.dense("lm_head", mat(d.Vocab, d.Hidden))
	b.json("config.json", map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
		"hidden_size": d.Hidden, "intermediate_size": d.Inter, "num_hidden_layers": d.Layers,
		"num_attention_heads": d.Heads, "num_key_value_heads": d.KVHeads, "head_dim": d.HeadDim,
		"vocab_size": d.Vocab, "max_position_embeddings": d.MaxPos, "torch_dtype": "bfloat16",
	})
	return b.finish(1)
}

// FitDeepSeekDims are FitDeepSeekMTP's dimensions (MLA, MoE from layer 1,
// one MTP layer at index Layers).
var FitDeepSeekDims = struct {
	Hidden, Inter, MoEInter, Layers, Vocab, Heads, Experts int
	QLora, KVLora, Rope, Nope, VHead, MaxPos               int
}{128, 256, 64, 2, 256, 2, 4, 64, 64, 16, 32, 32, 16384}

// FitDeepSeekMTP is a BF16 DeepSeek-V3-shaped repo: MLA attention, a dense
// first layer, routed and shared experts, and the MTP layer past
// num_hidden_layers (its own embed_tokens, enorm, hnorm, eh_proj and
// shared_head).
func FitDeepSeekMTP() *Repo {
	d := FitDeepSeekDims
	b := newBuilder(Org+"/DeepSeek-fit-MTP", "DeepSeek-V3-shaped BF16, MLA, MoE, one MTP layer", 1)
	r := rng(202)
	mat := func(out, in int) Matrix { return randomMatrix(r, []uint64{uint64(out), uint64(in)}, 0.02) }
	norm := func(name string, n int) { b.dense(name, normWeight(r, uint64(n))) }
	b.dense("model.embed_tokens", mat(d.Vocab, d.Hidden))
	for l := range d.Layers + 1 {
		p := fmt.Sprintf("model.layers.%d.", l)
		if l == d.Layers { // MTP
			b.dense(p+"embed_tokens", mat(d.Vocab, d.Hidden))
			norm(p+"enorm", d.Hidden)
			norm(p+"hnorm", d.Hidden)
			b.dense(p+"eh_proj", mat(d.Hidden, 2*d.Hidden))
			norm(p+"shared_head.norm", d.Hidden)
			b.dense(p+"shared_head.head", mat(d.Vocab, d.Hidden))
		}
		norm(p+"input_layernorm", d.Hidden)
		norm(p+"post_attention_layernorm", d.Hidden)
		norm(p+"self_attn.q_a_layernorm", d.QLora)
		norm(p+"self_attn.kv_a_layernorm", d.KVLora)
		b.dense(p+"self_attn.q_a_proj", mat(d.QLora, d.Hidden))
		b.dense(p+"self_attn.q_b_proj", mat(d.Heads*(d.Nope+d.Rope), d.QLora))
		b.dense(p+"self_attn.kv_a_proj_with_mqa", mat(d.KVLora+d.Rope, d.Hidden))
		b.dense(p+"self_attn.kv_b_proj", mat(d.Heads*(d.Nope+d.VHead), d.KVLora))
		b.dense(p+"self_attn.o_proj", mat(d.Hidden, d.Heads*d.VHead))
		if l == 0 {
			b.dense(p+"mlp.gate_proj", mat(d.Inter, d.Hidden))
			b.dense(p+"mlp.up_proj", mat(d.Inter, d.Hidden))
			b.dense(p+"mlp.down_proj", mat(d.Hidden, d.Inter))
			continue
		}
		b.dense(p+"mlp.gate", mat(d.Experts, d.Hidden))
		for e := range d.Experts {
			ep := fmt.Sprintf("%smlp.experts.%d.", p, e)
			b.dense(ep+"gate_proj", mat(d.MoEInter, d.Hidden))
			b.dense(ep+"up_proj", mat(d.MoEInter, d.Hidden))
			b.dense(ep+"down_proj", mat(d.Hidden, d.MoEInter))
		}
		b.dense(p+"mlp.shared_experts.gate_proj", mat(d.MoEInter, d.Hidden))
		b.dense(p+"mlp.shared_experts.up_proj", mat(d.MoEInter, d.Hidden))
		b.dense(p+"mlp.shared_experts.down_proj", mat(d.Hidden, d.MoEInter))
	}
	norm("model.norm", d.Hidden)
	b.dense("lm_head", mat(d.Vocab, d.Hidden))
	b.json("config.json", map[string]any{
		"architectures": []string{"DeepseekV3ForCausalLM"}, "model_type": "deepseek_v3",
		"hidden_size": d.Hidden, "intermediate_size": d.Inter, "moe_intermediate_size": d.MoEInter,
		"num_hidden_layers": d.Layers, "num_nextn_predict_layers": 1, "first_k_dense_replace": 1,
		"n_routed_experts": d.Experts, "n_shared_experts": 1, "num_attention_heads": d.Heads, "num_key_value_heads": d.Heads,
		"q_lora_rank": d.QLora, "kv_lora_rank": d.KVLora, "qk_rope_head_dim": d.Rope, "qk_nope_head_dim": d.Nope, "v_head_dim": d.VHead,
		"vocab_size": d.Vocab, "max_position_embeddings": d.MaxPos, "torch_dtype": "bfloat16",
	})
	return b.finish(1)
}

// FitSlidingDims are FitGPTOSSSliding's dimensions.
var FitSlidingDims = struct{ Hidden, Inter, Layers, Vocab, Heads, KVHeads, HeadDim, Experts, Window, MaxPos int }{128, 64, 4, 256, 4, 2, 32, 4, 128, 131072}

// FitGPTOSSSliding is a gpt-oss-shaped repo whose layer_types alternate
// sliding_attention (window 128) and full_attention, with MXFP4 experts
// (fused gate_up_proj and down_proj, `_blocks`/`_scales`, BF16 biases) and
// BF16 attention with biases and sinks.
func FitGPTOSSSliding() *Repo {
	d := FitSlidingDims
	b := newBuilder(Org+"/gpt-oss-fit-sliding", "gpt-oss-shaped, layer_types sliding/full (window 128), MXFP4 experts", 1)
	r := rng(203)
	mat := func(shape ...uint64) Matrix { return randomMatrix(r, shape, 0.02) }
	H, I, E := uint64(d.Hidden), uint64(d.Inter), uint64(d.Experts)
	b.dense("model.embed_tokens", mat(uint64(d.Vocab), H))
	var types []string
	for l := range d.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		types = append(types, []string{"sliding_attention", "full_attention"}[l%2])
		b.dense(p+"input_layernorm", normWeight(r, H))
		b.dense(p+"post_attention_layernorm", normWeight(r, H))
		for _, lin := range []struct {
			name    string
			out, in int
		}{{"q_proj", d.Heads * d.HeadDim, d.Hidden}, {"k_proj", d.KVHeads * d.HeadDim, d.Hidden},
			{"v_proj", d.KVHeads * d.HeadDim, d.Hidden}, {"o_proj", d.Hidden, d.Heads * d.HeadDim}} {
			b.dense(p+"self_attn."+lin.name, mat(uint64(lin.out), uint64(lin.in)))
			b.add(Dense(p+"self_attn."+lin.name+".bias", mat(uint64(lin.out)))...)
		}
		b.add(Dense(p+"self_attn.sinks", mat(uint64(d.Heads)))...)
		b.dense(p+"mlp.router", mat(E, H))
		b.add(Dense(p+"mlp.router.bias", mat(E))...)
		gu := mat(E, 2*I, H)
		b.add(MXFP4(p+"mlp.experts.gate_up_proj", gu)...)
		b.add(Dense(p+"mlp.experts.gate_up_proj_bias", mat(E, 2*I))...)
		b.record(p+"mlp.experts.gate_up_proj", gu, "mxfp4")
		dn := mat(E, H, I)
		b.add(MXFP4(p+"mlp.experts.down_proj", dn)...)
		b.add(Dense(p+"mlp.experts.down_proj_bias", mat(E, H))...)
		b.record(p+"mlp.experts.down_proj", dn, "mxfp4")
	}
	b.dense("model.norm", normWeight(r, H))
	b.dense("lm_head", mat(uint64(d.Vocab), H))
	b.json("config.json", map[string]any{
		"architectures": []string{"GptOssForCausalLM"}, "model_type": "gpt_oss",
		"hidden_size": d.Hidden, "intermediate_size": d.Inter, "num_local_experts": d.Experts, "num_hidden_layers": d.Layers,
		"num_attention_heads": d.Heads, "num_key_value_heads": d.KVHeads, "head_dim": d.HeadDim, "vocab_size": d.Vocab,
		"sliding_window": d.Window, "layer_types": types, "max_position_embeddings": d.MaxPos, "torch_dtype": "bfloat16",
		"quantization_config": map[string]any{"quant_method": "mxfp4", "modules_to_not_convert": []string{
			"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
	})
	return b.finish(1)
}

// FitFP8KVDims are FitFP8KV's dimensions: 8 heads, 4 KV heads, head_dim
// derived (hidden/heads = 16).
var FitFP8KVDims = struct{ Hidden, Inter, Layers, Vocab, Heads, KVHeads, MaxPos int }{128, 256, 2, 256, 8, 4, 2048}

// FitFP8KV is a ModelOpt FP8 export whose hf_quant_config.json declares an
// FP8 KV cache (kv_cache_quant_algo FP8): per-tensor FP8 linears (weight,
// weight_scale, input_scale) and the k_proj.k_scale / v_proj.v_scale
// scalars ModelOpt writes for the cache; embeddings, norms and lm_head BF16.
func FitFP8KV() *Repo {
	d := FitFP8KVDims
	b := newBuilder(Org+"/Llama-fit-FP8-KV", "ModelOpt FP8 with an FP8 KV cache (kv_cache_quant_algo FP8)", 1)
	r := rng(204)
	mat := func(out, in int) Matrix { return randomMatrix(r, []uint64{uint64(out), uint64(in)}, 0.02) }
	hd := d.Hidden / d.Heads
	fp8 := func(name string, m Matrix) ([]st.WriteTensor, string) { return FP8Tensor(name, m, 4), "fp8" }
	b.dense("model.embed_tokens", mat(d.Vocab, d.Hidden))
	for l := range d.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		b.dense(p+"input_layernorm", normWeight(r, uint64(d.Hidden)))
		b.dense(p+"post_attention_layernorm", normWeight(r, uint64(d.Hidden)))
		b.linear(p+"self_attn.q_proj", mat(d.Heads*hd, d.Hidden), fp8)
		b.linear(p+"self_attn.k_proj", mat(d.KVHeads*hd, d.Hidden), fp8)
		b.linear(p+"self_attn.v_proj", mat(d.KVHeads*hd, d.Hidden), fp8)
		b.add(st.WriteTensor{Name: p + "self_attn.k_proj.k_scale", DType: st.F32, Shape: []uint64{}, Data: f32Bytes(0.01)},
			st.WriteTensor{Name: p + "self_attn.v_proj.v_scale", DType: st.F32, Shape: []uint64{}, Data: f32Bytes(0.01)})
		b.linear(p+"self_attn.o_proj", mat(d.Hidden, d.Heads*hd), fp8)
		b.linear(p+"mlp.gate_proj", mat(d.Inter, d.Hidden), fp8)
		b.linear(p+"mlp.up_proj", mat(d.Inter, d.Hidden), fp8)
		b.linear(p+"mlp.down_proj", mat(d.Hidden, d.Inter), fp8)
	}
	b.dense("model.norm", normWeight(r, uint64(d.Hidden)))
	b.dense("lm_head", mat(d.Vocab, d.Hidden))
	q := map[string]any{"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": []string{"lm_head"}}
	b.json("hf_quant_config.json", map[string]any{"producer": map[string]any{"name": "modelopt", "version": "0.29.0"}, "quantization": q})
	b.json("config.json", map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
		"hidden_size": d.Hidden, "intermediate_size": d.Inter, "num_hidden_layers": d.Layers,
		"num_attention_heads": d.Heads, "num_key_value_heads": d.KVHeads,
		"vocab_size": d.Vocab, "max_position_embeddings": d.MaxPos, "torch_dtype": "bfloat16",
	})
	return b.finish(1)
}

// WriteLlama70BFP8Shape writes, under dir, a repo shaped like a ModelOpt FP8
// export of Llama-3.1-70B (80 layers, hidden 8192, 64 heads, 8 KV heads,
// MLP 28672, vocab 128256, FP8 per-tensor linears with their k/v cache
// scales, an FP8 KV cache declared): the headers, index and configs are
// real, the data sparse (the shards are truncated to size, nothing is
// written), so its 72 GB take a few hundred kB of disk. The page's
// "Will it fit" figure is drawn from it.
func WriteLlama70BFP8Shape(dir string) error {
	const hidden, inter, layers, heads, kvHeads, vocab, hd = 8192, 28672, 80, 64, 8, 128256, 128
	const shards = 16
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	per := make([][]st.Entry, shards)
	dense := func(s int, name string, shape ...uint64) {
		n := uint64(2)
		for _, d := range shape {
			n *= d
		}
		per[s] = append(per[s], st.Entry{Name: name, DType: st.BF16, Shape: shape, NBytes: n})
	}
	scalar := func(s int, name string) {
		per[s] = append(per[s], st.Entry{Name: name, DType: st.F32, Shape: []uint64{}, NBytes: 4})
	}
	dense(0, "model.embed_tokens.weight", vocab, hidden)
	for l := range layers {
		s := 1 + l*(shards-2)/layers
		p := fmt.Sprintf("model.layers.%d.", l)
		dense(s, p+"input_layernorm.weight", hidden)
		dense(s, p+"post_attention_layernorm.weight", hidden)
		for _, lin := range []struct {
			name    string
			out, in uint64
		}{{"self_attn.q_proj", heads * hd, hidden}, {"self_attn.k_proj", kvHeads * hd, hidden}, {"self_attn.v_proj", kvHeads * hd, hidden},
			{"self_attn.o_proj", hidden, heads * hd}, {"mlp.gate_proj", inter, hidden}, {"mlp.up_proj", inter, hidden}, {"mlp.down_proj", hidden, inter}} {
			per[s] = append(per[s], st.Entry{Name: p + lin.name + ".weight", DType: st.F8_E4M3, Shape: []uint64{lin.out, lin.in}, NBytes: lin.out * lin.in})
			scalar(s, p+lin.name+".weight_scale")
			scalar(s, p+lin.name+".input_scale")
		}
		scalar(s, p+"self_attn.k_proj.k_scale")
		scalar(s, p+"self_attn.v_proj.v_scale")
	}
	dense(shards-1, "model.norm.weight", hidden)
	dense(shards-1, "lm_head.weight", vocab, hidden)
	weightMap := map[string]string{}
	var total uint64
	for s, entries := range per {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		_, n, err := writeSparseShard(filepath.Join(dir, name), entries)
		if err != nil {
			return err
		}
		total += n
		for _, e := range entries {
			weightMap[e.Name] = name
		}
	}
	q := map[string]any{"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": []string{"lm_head"}}
	files := map[string]any{
		"model.safetensors.index.json": map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap},
		"hf_quant_config.json":         map[string]any{"producer": map[string]any{"name": "modelopt", "version": "0.29.0"}, "quantization": q},
		"config.json": map[string]any{"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
			"hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
			"num_key_value_heads": kvHeads, "head_dim": hd, "vocab_size": vocab, "max_position_embeddings": 131072,
			"rope_theta": 500000.0, "torch_dtype": "bfloat16"},
	}
	for p, v := range files {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, p), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
