package synth

import (
	"fmt"
	"math"

	"github.com/quantscope/quantscope/formats/packing"
	st "github.com/quantscope/quantscope/formats/safetensors"
)

// LlamaSpec is a small Llama decoder for the forward's tests and benchmarks:
// seeded random weights drawn at the scale of an initialised model (a linear
// with n inputs has standard deviation 1/√n), so attention and the MLP do
// real work.
type LlamaSpec struct {
	ID                    string // ORG/NAME of the repo
	Layers, Hidden, Inter int
	Heads, KVHeads, Vocab int
	Seed                  uint64
	Tied                  bool    // tie_word_embeddings: no lm_head tensor
	RopeTheta             float64 // 0: 500000
	Llama3Scaling         bool    // rope_scaling of type llama3 (factor 8, as Llama 3.1 ships it)
	MaxPosition           int     // 0: 8192
	AttentionBias         bool    // q/k/v/o biases (attention_bias)
}

// SmallLlama is the forward tests' model: 2 layers, hidden 256, 4 heads
// over 2 KV heads (GQA), vocab 512, llama3 RoPE scaling.
func SmallLlama() LlamaSpec {
	return LlamaSpec{ID: Org + "/Llama-small", Layers: 2, Hidden: 256, Inter: 768, Heads: 4, KVHeads: 2, Vocab: 512, Seed: 901, Llama3Scaling: true}
}

// LlamaWeights draws the decoder's float32 weights by module name (HF names
// without ".weight"; biases under NAME.bias).
func LlamaWeights(s LlamaSpec) map[string]Matrix {
	r := rng(s.Seed)
	w := map[string]Matrix{}
	sh := func(a, b int) []uint64 { return []uint64{uint64(a), uint64(b)} }
	w["model.embed_tokens"] = randomMatrix(r, sh(s.Vocab, s.Hidden), 1)
	for l := range s.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		w[p+"input_layernorm"] = normWeight(r, uint64(s.Hidden))
		w[p+"post_attention_layernorm"] = normWeight(r, uint64(s.Hidden))
		for _, lin := range llamaLinears(s) {
			w[p+lin.name] = randomMatrix(r, sh(lin.out, lin.in), float32(1/math.Sqrt(float64(lin.in))))
			if s.AttentionBias && lin.name[:4] == "self" {
				w[p+lin.name+".bias"] = randomMatrix(r, []uint64{uint64(lin.out)}, 0.1)
			}
		}
	}
	w["model.norm"] = normWeight(r, uint64(s.Hidden))
	if !s.Tied {
		w["lm_head"] = randomMatrix(r, sh(s.Vocab, s.Hidden), float32(1/math.Sqrt(float64(s.Hidden))))
	}
	return w
}

type llamaLinear struct {
	name    string
	out, in int
}

func llamaLinears(s LlamaSpec) []llamaLinear {
	hd := s.Hidden / s.Heads
	return []llamaLinear{
		{"self_attn.q_proj", s.Heads * hd, s.Hidden},
		{"self_attn.k_proj", s.KVHeads * hd, s.Hidden},
		{"self_attn.v_proj", s.KVHeads * hd, s.Hidden},
		{"self_attn.o_proj", s.Hidden, s.Heads * hd},
		{"mlp.gate_proj", s.Inter, s.Hidden},
		{"mlp.up_proj", s.Inter, s.Hidden},
		{"mlp.down_proj", s.Hidden, s.Inter},
	}
}

// LlamaRepo writes weights as a Llama checkpoint. storage "bf16" and "f32"
// store every tensor in that dtype; "gptq" stores the seven projections of
// each layer as GPTQ INT4 (v1, symmetric, group 128, desc_act off: zero
// points stored as 7) and the rest in BF16, as GPT-QModel exports.
func LlamaRepo(s LlamaSpec, weights map[string]Matrix, storage string) (*Repo, error) {
	dense := func(name string, m Matrix) []st.WriteTensor {
		if storage == "f32" {
			return []st.WriteTensor{{Name: name, DType: st.F32, Shape: m.Shape, Data: f32Bytes(m.Data...)}}
		}
		return Dense(name, m)
	}
	switch storage {
	case "bf16", "f32", "gptq":
	default:
		return nil, fmt.Errorf("synth: storage %q: want bf16, f32 or gptq", storage)
	}
	b := newBuilder(s.ID, fmt.Sprintf("Llama, %d layers, hidden %d, %s", s.Layers, s.Hidden, storage), 1)
	for name, m := range weights {
		tensor := name + ".weight"
		if len(name) > 5 && name[len(name)-5:] == ".bias" {
			tensor = name
		}
		quant := storage == "gptq" && len(m.Shape) == 2 && name != "model.embed_tokens" && name != "lm_head"
		if quant {
			ts, err := GPTQSym4(name, m)
			if err != nil {
				return nil, err
			}
			b.add(ts...)
			b.record(name, m, "int4")
			continue
		}
		b.add(dense(tensor, m)...)
		b.record(name, m, storage)
	}
	var qc map[string]any
	dtype := "bfloat16"
	if storage == "f32" {
		dtype = "float32"
	}
	if storage == "gptq" {
		dtype = "float16"
		qc = map[string]any{
			"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": true, "desc_act": false,
			"checkpoint_format": "gptq", "damp_percent": 0.01, "true_sequential": true, "static_groups": false,
			"lm_head": false,
		}
	}
	b.json("config.json", LlamaConfig(s, dtype, qc))
	if s.Vocab >= 258 {
		tj, err := LlamaTokenizer(s.Vocab)
		if err != nil {
			return nil, err
		}
		b.repo.Files["tokenizer.json"] = tj
	}
	return b.finish(1), nil
}

// LlamaConfig is config.json as transformers writes it for LlamaForCausalLM.
func LlamaConfig(s LlamaSpec, dtype string, qc map[string]any) map[string]any {
	theta := s.RopeTheta
	if theta == 0 {
		theta = 500000
	}
	maxPos := s.MaxPosition
	if maxPos == 0 {
		maxPos = 8192
	}
	c := map[string]any{
		"architectures":           []string{"LlamaForCausalLM"},
		"attention_bias":          s.AttentionBias,
		"attention_dropout":       0.0,
		"bos_token_id":            1,
		"eos_token_id":            2,
		"head_dim":                s.Hidden / s.Heads,
		"hidden_act":              "silu",
		"hidden_size":             s.Hidden,
		"initializer_range":       0.02,
		"intermediate_size":       s.Inter,
		"max_position_embeddings": maxPos,
		"mlp_bias":                false,
		"model_type":              "llama",
		"num_attention_heads":     s.Heads,
		"num_hidden_layers":       s.Layers,
		"num_key_value_heads":     s.KVHeads,
		"pretraining_tp":          1,
		"rms_norm_eps":            1e-05,
		"rope_scaling":            nil,
		"rope_theta":              theta,
		"tie_word_embeddings":     s.Tied,
		"torch_dtype":             dtype,
		"transformers_version":    "4.46.1",
		"use_cache":               true,
		"vocab_size":              s.Vocab,
	}
	if s.Llama3Scaling {
		c["rope_scaling"] = map[string]any{
			"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
			"original_max_position_embeddings": maxPos / 4, "rope_type": "llama3",
		}
	}
	if qc != nil {
		c["quantization_config"] = qc
	}
	return c
}

// GPTQSym4 writes a symmetric GPTQ INT4 linear, group 128, v1 format:
// scale = max|w|/7.5 per group (rounded to F16), q = clamp(round(w/s)+8, 0, 15),
// zero points 8 stored as 7, g_idx = i/128.
func GPTQSym4(name string, m Matrix) ([]st.WriteTensor, error) {
	out, in := rowsCols(m)
	if in%128 != 0 {
		return nil, fmt.Errorf("synth: %s: %d inputs are not a multiple of 128", name, in)
	}
	codes, sc, _ := intGroups(m, 4, 128, true, 0, roundF16)
	groups := in / 128
	q := make([]uint8, in*out)
	for o := range out {
		for i := range in {
			q[i*out+o] = uint8(int(codes[o*in+i]) + 8)
		}
	}
	qw, err := packing.PackGPTQWeight(q, in, out, 4)
	if err != nil {
		return nil, err
	}
	scales := make([]float32, groups*out)
	stored := make([]uint8, groups*out)
	for o := range out {
		for k := range groups {
			scales[k*out+o] = sc[o*groups+k]
			stored[k*out+o] = 7
		}
	}
	qz, err := packing.PackRowBits(stored, groups, out, 4)
	if err != nil {
		return nil, err
	}
	gidx := make([]int32, in)
	for i := range gidx {
		gidx[i] = int32(i / 128)
	}
	return []st.WriteTensor{
		{Name: name + ".qweight", DType: st.I32, Shape: []uint64{uint64(in / 8), uint64(out)}, Data: qw},
		{Name: name + ".qzeros", DType: st.I32, Shape: []uint64{uint64(groups), uint64(out / 8)}, Data: qz},
		{Name: name + ".scales", DType: st.F16, Shape: []uint64{uint64(groups), uint64(out)}, Data: f16Bytes(scales)},
		{Name: name + ".g_idx", DType: st.I32, Shape: []uint64{uint64(in)}, Data: i32Bytes(gidx)},
	}, nil
}
