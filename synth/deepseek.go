package synth

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	st "github.com/quantscope/quantscope/formats/safetensors"
)

// DeepSeekDims is the shape of a DeepSeek-V3 decoder: MLA attention, the
// first DenseLayers layers with a dense MLP, the rest with routed experts, a
// shared expert and a router, and MTP layers past Layers.
type DeepSeekDims struct {
	Hidden, Vocab, Layers, DenseLayers, MTPLayers            int
	Experts, SharedExperts, Intermediate, MoEIntermediate    int
	Heads, QLoraRank, KVLoraRank, RopeDim, NopeDim, VHeadDim int
}

// DeepSeekV3 is the real architecture (DeepSeek-V3, DeepSeek-R1).
var DeepSeekV3 = DeepSeekDims{Hidden: 7168, Vocab: 129280, Layers: 61, DenseLayers: 3, MTPLayers: 1,
	Experts: 256, SharedExperts: 1, Intermediate: 18432, MoEIntermediate: 2048,
	Heads: 128, QLoraRank: 1536, KVLoraRank: 512, RopeDim: 64, NopeDim: 128, VHeadDim: 128}

// DeepSeekMini is the same architecture small enough to quantize in milliseconds.
// Its proportions follow the real one's: the routed experts hold most of
// the parameters.
var DeepSeekMini = DeepSeekDims{Hidden: 128, Vocab: 128, Layers: 11, DenseLayers: 1, MTPLayers: 1,
	Experts: 4, SharedExperts: 1, Intermediate: 128, MoEIntermediate: 64,
	Heads: 1, QLoraRank: 16, KVLoraRank: 16, RopeDim: 16, NopeDim: 16, VHeadDim: 16}

// Kinds of DeepSeek modules, for deciding how each is stored.
const (
	dsEmbed  = iota // embeddings and heads, BF16 everywhere
	dsNorm          // RMSNorm vectors, BF16
	dsAttn          // MLA linears
	dsMLP           // the dense layers' MLP
	dsExpert        // routed experts
	dsShared        // shared experts
	dsRouter        // mlp.gate, BF16
	dsBias          // mlp.gate.e_score_correction_bias, F32 (a tensor of its own)
	dsEHProj        // the MTP layer's eh_proj, BF16 in DeepSeek's own release
)

// DeepSeekModule is one module of a DeepSeek-V3 checkpoint: a linear [Out, In]
// or a vector [Out] (In 0).
type DeepSeekModule struct {
	Name    string
	Kind    int
	Layer   int // -1 outside the layers
	Out, In uint64
}

// Params is the module's logical parameter count.
func (m DeepSeekModule) Params() uint64 {
	if m.In == 0 {
		return m.Out
	}
	return m.Out * m.In
}

func (m DeepSeekModule) shape() []uint64 {
	if m.In == 0 {
		return []uint64{m.Out}
	}
	return []uint64{m.Out, m.In}
}

// Modules lists every module of the architecture in a stable order, as
// DeepSeek's release names them (the MTP layer's embed_tokens, enorm, hnorm,
// eh_proj and shared_head included).
func (d DeepSeekDims) Modules() []DeepSeekModule {
	u := func(v int) uint64 { return uint64(v) }
	h := u(d.Hidden)
	out := []DeepSeekModule{{"model.embed_tokens", dsEmbed, -1, u(d.Vocab), h}}
	for l := range d.Layers + d.MTPLayers {
		p := fmt.Sprintf("model.layers.%d.", l)
		add := func(name string, kind int, o, i uint64) {
			out = append(out, DeepSeekModule{p + name, kind, l, o, i})
		}
		add("input_layernorm", dsNorm, h, 0)
		add("post_attention_layernorm", dsNorm, h, 0)
		add("self_attn.q_a_proj", dsAttn, u(d.QLoraRank), h)
		add("self_attn.q_a_layernorm", dsNorm, u(d.QLoraRank), 0)
		add("self_attn.q_b_proj", dsAttn, u(d.Heads*(d.NopeDim+d.RopeDim)), u(d.QLoraRank))
		add("self_attn.kv_a_proj_with_mqa", dsAttn, u(d.KVLoraRank+d.RopeDim), h)
		add("self_attn.kv_a_layernorm", dsNorm, u(d.KVLoraRank), 0)
		add("self_attn.kv_b_proj", dsAttn, u(d.Heads*(d.NopeDim+d.VHeadDim)), u(d.KVLoraRank))
		add("self_attn.o_proj", dsAttn, h, u(d.Heads*d.VHeadDim))
		if l < d.DenseLayers {
			add("mlp.gate_proj", dsMLP, u(d.Intermediate), h)
			add("mlp.up_proj", dsMLP, u(d.Intermediate), h)
			add("mlp.down_proj", dsMLP, h, u(d.Intermediate))
		} else {
			add("mlp.gate", dsRouter, u(d.Experts), h)
			add("mlp.gate.e_score_correction_bias", dsBias, u(d.Experts), 0)
			for e := range d.Experts {
				ep := fmt.Sprintf("mlp.experts.%d.", e)
				add(ep+"gate_proj", dsExpert, u(d.MoEIntermediate), h)
				add(ep+"up_proj", dsExpert, u(d.MoEIntermediate), h)
				add(ep+"down_proj", dsExpert, h, u(d.MoEIntermediate))
			}
			si := u(d.MoEIntermediate * d.SharedExperts)
			add("mlp.shared_experts.gate_proj", dsShared, si, h)
			add("mlp.shared_experts.up_proj", dsShared, si, h)
			add("mlp.shared_experts.down_proj", dsShared, h, si)
		}
		if l >= d.Layers {
			add("embed_tokens", dsEmbed, u(d.Vocab), h)
			add("enorm", dsNorm, h, 0)
			add("hnorm", dsNorm, h, 0)
			add("eh_proj", dsEHProj, h, 2*h)
			add("shared_head.norm", dsNorm, h, 0)
			add("shared_head.head", dsEmbed, u(d.Vocab), h)
		}
	}
	return append(out, DeepSeekModule{"model.norm", dsNorm, -1, h, 0}, DeepSeekModule{"lm_head", dsEmbed, -1, u(d.Vocab), h})
}

// Stored formats of a DeepSeek module in the two releases.
const (
	StoreBF16  = "bf16"
	StoreF32   = "f32"
	StoreFP8   = "fp8"   // F8_E4M3 weight + F32 weight_scale_inv per 128×128 block
	StoreNVFP4 = "nvfp4" // ModelOpt: U8 weight, E4M3 weight_scale per 16, F32 weight_scale_2 and input_scale
)

// StoredFP8 is how deepseek-ai/DeepSeek-R1 stores a module: every linear FP8
// with 128×128 block scales except the MTP layer's eh_proj; the router,
// norms, embeddings and heads BF16; the router's score bias F32.
func (d DeepSeekDims) StoredFP8(m DeepSeekModule) string {
	switch m.Kind {
	case dsAttn, dsMLP, dsExpert, dsShared:
		return StoreFP8
	case dsBias:
		return StoreF32
	}
	return StoreBF16
}

// StoredNVFP4 is how nvidia/DeepSeek-R1-FP4 (ModelOpt 0.23.0) stores it:
// the MLP, routed and shared experts of the decoder layers NVFP4; attention,
// routers, norms, embeddings, the head and the whole MTP layer excluded (BF16);
// the router's score bias F32.
func (d DeepSeekDims) StoredNVFP4(m DeepSeekModule) string {
	switch {
	case m.Kind == dsBias:
		return StoreF32
	case m.Layer >= 0 && m.Layer < d.Layers && (m.Kind == dsMLP || m.Kind == dsExpert || m.Kind == dsShared):
		return StoreNVFP4
	}
	return StoreBF16
}

// entries are a module's header entries when stored in format.
func (m DeepSeekModule) entries(format string) []st.Entry {
	w := m.Name + ".weight"
	switch format {
	case StoreFP8:
		br, bc := (m.Out+127)/128, (m.In+127)/128
		return []st.Entry{{Name: w, DType: st.F8_E4M3, Shape: m.shape(), NBytes: m.Params()},
			{Name: m.Name + ".weight_scale_inv", DType: st.F32, Shape: []uint64{br, bc}, NBytes: 4 * br * bc}}
	case StoreNVFP4:
		return []st.Entry{{Name: w, DType: st.U8, Shape: []uint64{m.Out, m.In / 2}, NBytes: m.Params() / 2},
			{Name: m.Name + ".weight_scale", DType: st.F8_E4M3, Shape: []uint64{m.Out, m.In / 16}, NBytes: m.Params() / 16},
			{Name: m.Name + ".weight_scale_2", DType: st.F32, Shape: []uint64{}, NBytes: 4},
			{Name: m.Name + ".input_scale", DType: st.F32, Shape: []uint64{}, NBytes: 4}}
	case StoreF32:
		return []st.Entry{{Name: m.Name, DType: st.F32, Shape: m.shape(), NBytes: 4 * m.Params()}}
	}
	return []st.Entry{{Name: w, DType: st.BF16, Shape: m.shape(), NBytes: 2 * m.Params()}}
}

// config is config.json of the architecture (without quantization_config).
func (d DeepSeekDims) config() map[string]any {
	return map[string]any{
		"architectures": []string{"DeepseekV3ForCausalLM"}, "model_type": "deepseek_v3",
		"hidden_size": d.Hidden, "vocab_size": d.Vocab, "num_hidden_layers": d.Layers, "num_nextn_predict_layers": d.MTPLayers,
		"first_k_dense_replace": d.DenseLayers, "n_routed_experts": d.Experts, "n_shared_experts": d.SharedExperts,
		"intermediate_size": d.Intermediate, "moe_intermediate_size": d.MoEIntermediate,
		"num_attention_heads": d.Heads, "num_key_value_heads": d.Heads, "q_lora_rank": d.QLoraRank, "kv_lora_rank": d.KVLoraRank,
		"qk_rope_head_dim": d.RopeDim, "qk_nope_head_dim": d.NopeDim, "v_head_dim": d.VHeadDim,
		"max_position_embeddings": 163840, "torch_dtype": "bfloat16",
	}
}

func (d DeepSeekDims) fp8Config() map[string]any {
	c := d.config()
	c["quantization_config"] = map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": []int{128, 128}}
	return c
}

// excludeModules is ModelOpt's exclude list as nvidia/DeepSeek-R1-FP4 writes
// it: self_attn* of every decoder layer, the router of each MoE layer, the
// layer norms, model.norm, model.embed_tokens, lm_head and the MTP layers.
func (d DeepSeekDims) excludeModules() []string {
	var ex []string
	for l := range d.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		ex = append(ex, p+"self_attn*", p+"input_layernorm", p+"post_attention_layernorm")
		if l >= d.DenseLayers {
			ex = append(ex, p+"mlp.gate")
		}
	}
	ex = append(ex, "model.norm", "model.embed_tokens", "lm_head")
	for l := d.Layers; l < d.Layers+d.MTPLayers; l++ {
		ex = append(ex, fmt.Sprintf("model.layers.%d*", l))
	}
	return ex
}

func (d DeepSeekDims) nvfp4Configs() (config, hfQuant map[string]any) {
	ex := d.excludeModules()
	config = d.config()
	config["quantization_config"] = map[string]any{"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
		"kv_cache_quant_algo": nil, "exclude_modules": ex}
	hfQuant = map[string]any{"producer": map[string]any{"name": "modelopt", "version": "0.23.0"},
		"quantization": map[string]any{"quant_algo": "NVFP4", "kv_cache_quant_algo": nil, "group_size": 16, "exclude_modules": ex}}
	return config, hfQuant
}

// deepseekMini writes DeepSeekMini with real, seeded weights, each module
// stored as store says (the same seed gives the same weights in both releases).
func deepseekMini(id, about string, store func(DeepSeekModule) string) *builder {
	d := DeepSeekMini
	b := newBuilder(id, about, 2)
	r := rng(111)
	for _, m := range d.Modules() {
		b.shard(0)
		if m.Layer >= d.Layers/2 || (m.Layer < 0 && m.Name != "model.embed_tokens") {
			b.shard(1)
		}
		std := float32(0.02)
		if m.In == 0 {
			std = 0.1
		}
		w := randomMatrix(r, m.shape(), std)
		switch f := store(m); f {
		case StoreFP8:
			b.linear(m.Name, w, func(name string, w Matrix) ([]st.WriteTensor, string) { return FP8Block(name, w, 128), f })
		case StoreNVFP4:
			b.linear(m.Name, w, func(name string, w Matrix) ([]st.WriteTensor, string) {
				return NVFP4ModelOpt(name, w, 4, st.F32), f
			})
		case StoreF32:
			b.add(st.WriteTensor{Name: m.Name, DType: st.F32, Shape: w.Shape, Data: f32Bytes(w.Data...)})
			b.record(m.Name, w, f)
		default:
			b.dense(m.Name, w)
		}
	}
	return b
}

// DeepSeekMiniFP8 is DeepSeekMini stored as deepseek-ai/DeepSeek-R1 is: FP8
// 128×128 blocks with weight_scale_inv, an MTP layer past num_hidden_layers.
func DeepSeekMiniFP8() *Repo {
	d := DeepSeekMini
	b := deepseekMini(Org+"/DeepSeek-mini-FP8", "DeepSeek-V3-shaped FP8 128x128 blocks with an MTP layer (as deepseek-ai/DeepSeek-R1); compare with DeepSeek-mini-NVFP4", d.StoredFP8)
	b.json("config.json", d.fp8Config())
	return b.finish(1)
}

// DeepSeekMiniNVFP4 is the same weights stored as nvidia/DeepSeek-R1-FP4 is:
// ModelOpt NVFP4 experts and MLP, attention, routers and the MTP layer BF16.
func DeepSeekMiniNVFP4() *Repo {
	d := DeepSeekMini
	b := deepseekMini(Org+"/DeepSeek-mini-NVFP4", "DeepSeek-V3-shaped ModelOpt NVFP4, attention and the MTP layer excluded (as nvidia/DeepSeek-R1-FP4)", d.StoredNVFP4)
	config, hfq := d.nvfp4Configs()
	b.json("config.json", config)
	b.json("hf_quant_config.json", hfq)
	return b.finish(1)
}

// WriteDeepSeekSparse writes, under dir, a repo of architecture d stored as
// store says, in the given number of shards, with its index and configs:
// headers real, data sparse (each file is truncated to its size, nothing is
// written), so a 689 GB checkpoint takes a few tens of MB of disk. nvfp4
// picks ModelOpt's configs, else DeepSeek's FP8 config.
func (d DeepSeekDims) WriteDeepSeekSparse(dir string, shards int, nvfp4 bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	store := d.StoredFP8
	if nvfp4 {
		store = d.StoredNVFP4
	}
	mods := d.Modules()
	weightMap := map[string]string{}
	var total uint64
	for s := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		var entries []st.Entry
		for _, m := range mods[s*len(mods)/shards : (s+1)*len(mods)/shards] {
			entries = append(entries, m.entries(store(m))...)
		}
		_, n, err := writeSparseShard(filepath.Join(dir, name), entries)
		if err != nil {
			return err
		}
		total += n
		for _, e := range entries {
			weightMap[e.Name] = name
		}
	}
	files := map[string]any{"model.safetensors.index.json": map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}}
	if nvfp4 {
		files["config.json"], files["hf_quant_config.json"] = d.nvfp4Configs()
	} else {
		files["config.json"] = d.fp8Config()
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
