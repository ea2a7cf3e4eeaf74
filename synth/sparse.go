package synth

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	st "github.com/quantscope/quantscope/formats/safetensors"
)

// DeepSeek-V3's architecture (config.json of deepseek-ai/DeepSeek-R1), which
// nvidia/DeepSeek-R1-FP4 keeps.
const (
	dsHidden, dsInter, dsMoEInter, dsVocab = 7168, 18432, 2048, 129280
	dsLayers, dsDense, dsExperts           = 61, 3, 256 // decoder layers, the first dense ones, routed experts
	dsQLoRA, dsKVLoRA, dsRope, dsNope, dsV = 1536, 512, 64, 128, 128
	dsHeads                                = 128
)

// DeepSeekR1FP4Tensors is the tensor count of the repo WriteDeepSeekR1FP4Shape
// writes: 180,364, as in nvidia/DeepSeek-R1-FP4's 80 shards.
const DeepSeekR1FP4Tensors = 180364

// DeepSeekR1FP4Exclude is nvidia/DeepSeek-R1-FP4's exclude_modules (245
// entries): the attention of every decoder layer, the router of the 58 MoE
// layers, the two layernorms of every layer, the final norm, the embedding,
// the head, and all of the multi-token-prediction layer 61.
func DeepSeekR1FP4Exclude() []string {
	var ex []string
	for l := range dsLayers {
		ex = append(ex, fmt.Sprintf("model.layers.%d.self_attn*", l))
	}
	for l := dsDense; l < dsLayers; l++ {
		ex = append(ex, fmt.Sprintf("model.layers.%d.mlp.gate", l))
	}
	for l := range dsLayers {
		ex = append(ex, fmt.Sprintf("model.layers.%d.input_layernorm", l), fmt.Sprintf("model.layers.%d.post_attention_layernorm", l))
	}
	return append(ex, "model.norm", "model.embed_tokens", "lm_head", fmt.Sprintf("model.layers.%d*", dsLayers))
}

// deepSeekR1FP4Entries lists the tensors of nvidia/DeepSeek-R1-FP4 in layer
// order: every linear of layers 0–60 outside attention (dense MLPs, routed
// and shared experts) as ModelOpt exports NVFP4 (weight U8 [out, in/2],
// weight_scale F8_E4M3 [out, in/16], scalar F32 weight_scale_2 and
// input_scale), attention, norms, routers, embeddings, head and all of the
// MTP layer 61 in BF16, the routers' score-correction bias F32. 180,364
// tensors, 423,605,060,024 bytes (seed 004's measured figures).
func deepSeekR1FP4Entries() []st.Entry {
	var out []st.Entry
	bf16 := func(name string, shape ...uint64) {
		n := uint64(2)
		for _, d := range shape {
			n *= d
		}
		out = append(out, st.Entry{Name: name, DType: st.BF16, Shape: shape, NBytes: n})
	}
	nvfp4 := func(pre string, rows, cols uint64) {
		out = append(out,
			st.Entry{Name: pre + ".weight", DType: st.U8, Shape: []uint64{rows, cols / 2}, NBytes: rows * cols / 2},
			st.Entry{Name: pre + ".weight_scale", DType: st.F8_E4M3, Shape: []uint64{rows, cols / 16}, NBytes: rows * cols / 16},
			st.Entry{Name: pre + ".weight_scale_2", DType: st.F32, Shape: []uint64{}, NBytes: 4},
			st.Entry{Name: pre + ".input_scale", DType: st.F32, Shape: []uint64{}, NBytes: 4})
	}
	bf16("model.embed_tokens.weight", dsVocab, dsHidden)
	for l := 0; l <= dsLayers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		mtp := l == dsLayers
		linear := func(name string, rows, cols uint64) {
			if mtp {
				bf16(p+name+".weight", rows, cols)
			} else {
				nvfp4(p+name, rows, cols)
			}
		}
		bf16(p+"input_layernorm.weight", dsHidden)
		bf16(p+"post_attention_layernorm.weight", dsHidden)
		bf16(p+"self_attn.q_a_proj.weight", dsQLoRA, dsHidden)
		bf16(p+"self_attn.q_a_layernorm.weight", dsQLoRA)
		bf16(p+"self_attn.q_b_proj.weight", dsHeads*(dsNope+dsRope), dsQLoRA)
		bf16(p+"self_attn.kv_a_proj_with_mqa.weight", dsKVLoRA+dsRope, dsHidden)
		bf16(p+"self_attn.kv_a_layernorm.weight", dsKVLoRA)
		bf16(p+"self_attn.kv_b_proj.weight", dsHeads*(dsNope+dsV), dsKVLoRA)
		bf16(p+"self_attn.o_proj.weight", dsHidden, dsHeads*dsV)
		if l < dsDense {
			linear("mlp.gate_proj", dsInter, dsHidden)
			linear("mlp.up_proj", dsInter, dsHidden)
			linear("mlp.down_proj", dsHidden, dsInter)
		} else {
			bf16(p+"mlp.gate.weight", dsExperts, dsHidden)
			out = append(out, st.Entry{Name: p + "mlp.gate.e_score_correction_bias", DType: st.F32, Shape: []uint64{dsExperts}, NBytes: 4 * dsExperts})
			for e := range dsExperts {
				linear(fmt.Sprintf("mlp.experts.%d.gate_proj", e), dsMoEInter, dsHidden)
				linear(fmt.Sprintf("mlp.experts.%d.up_proj", e), dsMoEInter, dsHidden)
				linear(fmt.Sprintf("mlp.experts.%d.down_proj", e), dsHidden, dsMoEInter)
			}
			linear("mlp.shared_experts.gate_proj", dsMoEInter, dsHidden)
			linear("mlp.shared_experts.up_proj", dsMoEInter, dsHidden)
			linear("mlp.shared_experts.down_proj", dsHidden, dsMoEInter)
		}
		if mtp {
			bf16(p+"embed_tokens.weight", dsVocab, dsHidden)
			bf16(p+"enorm.weight", dsHidden)
			bf16(p+"hnorm.weight", dsHidden)
			bf16(p+"eh_proj.weight", dsHidden, 2*dsHidden)
			bf16(p+"shared_head.norm.weight", dsHidden)
			bf16(p+"shared_head.head.weight", dsVocab, dsHidden)
		}
	}
	bf16("model.norm.weight", dsHidden)
	bf16("lm_head.weight", dsVocab, dsHidden)
	return out
}

// DeepSeekV3Config is config.json of a DeepSeek-V3-architecture model
// (deepseek-ai/DeepSeek-R1's, without its FP8 quantization_config).
func DeepSeekV3Config() map[string]any {
	return map[string]any{
		"architectures": []string{"DeepseekV3ForCausalLM"}, "model_type": "deepseek_v3", "torch_dtype": "bfloat16",
		"attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
		"first_k_dense_replace": dsDense, "hidden_act": "silu", "hidden_size": dsHidden, "initializer_range": 0.02,
		"intermediate_size": dsInter, "kv_lora_rank": dsKVLoRA, "max_position_embeddings": 163840,
		"moe_intermediate_size": dsMoEInter, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": dsExperts,
		"n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": dsHeads, "num_experts_per_tok": 8,
		"num_hidden_layers": dsLayers, "num_key_value_heads": dsHeads, "num_nextn_predict_layers": 1,
		"q_lora_rank": dsQLoRA, "qk_nope_head_dim": dsNope, "qk_rope_head_dim": dsRope, "v_head_dim": dsV,
		"rms_norm_eps": 1e-6, "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
		"rope_scaling": map[string]any{"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
			"original_max_position_embeddings": 4096, "type": "yarn"},
		"tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc", "transformers_version": "4.46.3",
		"use_cache": true, "vocab_size": dsVocab,
	}
}

// WriteDeepSeekR1FP4Shape writes, under dir, a repo shaped like
// nvidia/DeepSeek-R1-FP4: its 180,364 tensors (deepSeekR1FP4Entries) cut in
// layer order into shards of about equal bytes, the index, DeepSeek-V3's
// config.json and ModelOpt 0.23.0's hf_quant_config.json with the 245
// exclude_modules. The headers are real; the data are sparse (the files are
// truncated to size, nothing is written), so 80 shards of about 5.3 GB each
// take a few MB of disk. It returns the header and JSON bytes.
func WriteDeepSeekR1FP4Shape(dir string, shards int) (headerBytes, jsonBytes int64, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	all := deepSeekR1FP4Entries()
	var total uint64
	for _, e := range all {
		total += e.NBytes
	}
	weightMap := map[string]string{}
	next, done := 0, uint64(0)
	for s := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		// This shard ends where the running total reaches (s+1)/shards of
		// the whole; the last takes the rest.
		end := next
		for end < len(all) && (s == shards-1 || done+all[end].NBytes <= total*uint64(s+1)/uint64(shards) || end == next) {
			done += all[end].NBytes
			end++
		}
		entries := all[next:end]
		next = end
		hl, _, err := writeSparseShard(filepath.Join(dir, name), entries)
		if err != nil {
			return 0, 0, err
		}
		headerBytes += hl
		for _, e := range entries {
			weightMap[e.Name] = name
		}
	}
	files := map[string]any{
		"model.safetensors.index.json": map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap},
		"config.json":                  DeepSeekV3Config(),
		"hf_quant_config.json": map[string]any{"producer": map[string]any{"name": "modelopt", "version": "0.23.0"},
			"quantization": map[string]any{"quant_algo": "NVFP4", "kv_cache_quant_algo": nil, "group_size": 16, "exclude_modules": DeepSeekR1FP4Exclude()}},
	}
	for p, v := range files {
		b, _ := json.MarshalIndent(v, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, p), b, 0o644); err != nil {
			return 0, 0, err
		}
		jsonBytes += int64(len(b))
	}
	return headerBytes, jsonBytes, nil
}

// writeSparse writes hdr and leaves the n data bytes after it a hole (the
// file system allocates nothing for them); fill may then write some of them.
func writeSparse(path string, hdr []byte, n uint64, fill func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(hdr); err != nil {
		f.Close()
		return err
	}
	if err := f.Truncate(int64(len(hdr)) + int64(n)); err != nil { // sparse: the weights are holes
		f.Close()
		return err
	}
	if err := fill(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeSparseShard writes a safetensors file whose header lists entries and
// whose data is a hole of the size they need; it returns the header's and
// the data's sizes.
func writeSparseShard(path string, entries []st.Entry) (headerLen int64, dataLen uint64, err error) {
	hdr, n, err := st.EncodeHeader(entries, map[string]string{"format": "pt"})
	if err != nil {
		return 0, 0, err
	}
	return int64(len(hdr)), n, writeSparse(path, hdr, n, func(*os.File) error { return nil })
}
