// Package anatomy says where a module sits in a decoder model, from its name
// and the model's config.json alone: its layer, its slot (q, k, v, o, gate,
// up, down, router, shared expert, routed experts, norms, ...), the kind a
// comparison of two repos groups it under, and how tensor parallelism splits
// it. The layer map, `quantscope diff` and `quantscope fit` all read modules
// through it, so the three views agree on what a module is.
//
// It knows the naming of the Hugging Face model families that ship quantized
// checkpoints (Llama, Mistral/Mixtral, Qwen 2/3 and their MoE, DeepSeek V2/V3
// with MLA and MTP, gpt-oss, Gemma, Phi, GPT-2/Falcon-style fused names);
// a name it does not know is slot "other", kind "other", replicated.
// It does not read tensors or shapes.
package anatomy

import (
	"strconv"
	"strings"
)

// Slots: the columns of the layer map.
const (
	SlotQ         = "q"       // q_proj, MLA q_a_proj / q_b_proj
	SlotK         = "k"       // k_proj
	SlotV         = "v"       // v_proj
	SlotKV        = "kv"      // MLA kv_a_proj_with_mqa / kv_b_proj
	SlotQKV       = "qkv"     // fused qkv_proj, c_attn, query_key_value, W_pack
	SlotO         = "o"       // o_proj, out_proj, c_proj of attention, dense
	SlotAttnOther = "attn"    // other attention tensors (sinks, ...)
	SlotGate      = "gate"    // gate_proj, w1
	SlotUp        = "up"      // up_proj, w3
	SlotGateUp    = "gate_up" // fused gate_up_proj
	SlotDown      = "down"    // down_proj, w2, c_proj of the MLP
	SlotRouter    = "router"  // MoE router (mlp.gate, router, block_sparse_moe.gate)
	SlotShared    = "shared"  // shared expert(s) and their gate
	SlotExperts   = "experts" // routed experts
	SlotNorm      = "norm"    // any norm inside a layer
	SlotEmbedding = "embedding"
	SlotHead      = "head"
	SlotOther     = "other"
)

// Kinds: the rows of `quantscope diff`.
const (
	KindRoutedExperts = "routed_experts"
	KindSharedExperts = "shared_experts"
	KindAttention     = "attention"
	KindMLP           = "mlp"
	KindRouter        = "router"
	KindEmbedding     = "embedding"
	KindHead          = "head"
	KindNorm          = "norm"
	KindExtraLayers   = "extra_layers" // any module of a layer index ≥ num_hidden_layers (DeepSeek's MTP layer)
	KindOther         = "other"
)

// Kinds lists the diff kinds in the order reports show them.
var Kinds = []string{KindRoutedExperts, KindSharedExperts, KindAttention, KindMLP, KindRouter,
	KindEmbedding, KindHead, KindNorm, KindExtraLayers, KindOther}

// Tensor-parallel splits.
const (
	SplitColumn     = "column"     // output features divided across ranks
	SplitRow        = "row"        // input features divided across ranks
	SplitVocab      = "vocab"      // embedding / head rows divided
	SplitExperts    = "experts"    // routed experts divided (EP or TP: each rank holds 1/N)
	SplitReplicated = "replicated" // every rank holds a copy (norms, routers, MLA down-projections)
)

// Place is where a module sits.
type Place struct {
	Layer int    // decoder layer index, -1 outside the numbered layers
	Slot  string // one of the Slot constants
	Kind  string // one of the Kind constants
	Split string // one of the Split constants
	// Extra is true for a layer at or past num_hidden_layers (an MTP layer),
	// and for a multi-token-prediction block named apart from the decoder
	// (Qwen3-Next's mtp.*).
	Extra bool
}

// Locate places the module named name in a model with numHiddenLayers
// decoder layers (0 when unknown: then no numbered layer counts as extra).
// A module of a vision or audio tower (visual.blocks.N, vision_tower.…,
// multi_modal_projector) keeps its block's number and slot but is kind
// "other" and never extra: its numbering is the tower's, not the decoder's.
// An mtp.* module is extra, at layer numHiddenLayers + its own index.
func Locate(name string, numHiddenLayers int) Place {
	n := strings.ToLower(name)
	p := Place{Layer: layerIndex(n)}
	p.Slot = slotOf(n, p.Layer >= 0)
	p.Split = splitOf(n, p.Slot)
	p.Kind = kindOf(p.Slot, n)
	switch {
	case tower(n):
		p.Kind = KindOther
	case strings.HasPrefix(n, "mtp.") || strings.HasPrefix(n, "model.mtp."):
		p.Extra, p.Kind = true, KindExtraLayers
		p.Layer = max(p.Layer, 0) + numHiddenLayers
	case p.Layer >= 0 && numHiddenLayers > 0 && p.Layer >= numHiddenLayers:
		p.Extra, p.Kind = true, KindExtraLayers
	}
	return p
}

// towers are the path elements under which a multimodal checkpoint keeps
// its encoders and projectors.
var towers = map[string]bool{
	"visual": true, "vision_tower": true, "vision_model": true, "vision_encoder": true, "vision": true,
	"audio_tower": true, "audio_model": true, "audio_encoder": true,
	"multi_modal_projector": true, "mm_projector": true, "vision_projection": true,
}

// tower says whether n (lower case) lies in a vision or audio tower: one of
// its path elements before any layer number is a tower's.
func tower(n string) bool {
	for len(n) > 0 {
		part, rest, _ := strings.Cut(n, ".")
		if towers[part] {
			return true
		}
		if isNumber(part) {
			return false
		}
		n = rest
	}
	return false
}

// layerIndex finds the number after a layers-like path element
// (model.layers.12., transformer.h.3., blocks.7.).
func layerIndex(n string) int {
	parts := strings.Split(n, ".")
	for i := 0; i+1 < len(parts); i++ {
		switch parts[i] {
		case "layers", "h", "blocks", "layer", "decoder_layers":
			if v, err := strconv.Atoi(parts[i+1]); err == nil && v >= 0 {
				return v
			}
		}
	}
	return -1
}

func has(n string, subs ...string) bool {
	for _, s := range subs {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// last returns the last dotted element of n.
func last(n string) string {
	if i := strings.LastIndexByte(n, '.'); i >= 0 {
		return n[i+1:]
	}
	return n
}

func slotOf(n string, inLayer bool) string {
	leaf := last(n)
	switch {
	case has(n, "norm") || strings.HasSuffix(n, "ln_f") || has(n, ".ln_"):
		return SlotNorm
	case has(n, "embed_tokens", "wte", "wpe", "word_embeddings") || leaf == "embed" || strings.HasSuffix(n, "embeddings"):
		return SlotEmbedding
	case has(n, "lm_head") || (!inLayer && (leaf == "output" || leaf == "head")) || strings.HasSuffix(n, "shared_head.head"):
		return SlotHead
	case has(n, "shared_expert"): // shared_experts.* (DeepSeek), shared_expert.* and shared_expert_gate (Qwen MoE)
		return SlotShared
	case has(n, "expert"):
		return SlotExperts
	case leaf == "router" || has(n, ".router.") || (leaf == "gate" && has(n, "mlp", "moe", "feed_forward")):
		return SlotRouter
	case has(n, "mlp.gate.", "moe.gate.", "feed_forward.gate."): // a router's own tensors (DeepSeek's e_score_correction_bias)
		return SlotRouter
	}
	attn := has(n, "attn", "attention")
	switch leaf {
	case "q_proj", "q_a_proj", "q_b_proj", "wq", "query":
		return SlotQ
	case "k_proj", "wk", "key":
		return SlotK
	case "v_proj", "wv", "value":
		return SlotV
	case "kv_a_proj_with_mqa", "kv_b_proj", "kv_proj":
		return SlotKV
	case "qkv_proj", "c_attn", "query_key_value", "w_pack", "wqkv":
		return SlotQKV
	case "o_proj", "out_proj", "wo", "dense":
		if attn || leaf == "o_proj" {
			return SlotO
		}
	case "gate_proj", "w1":
		return SlotGate
	case "up_proj", "w3", "c_fc", "dense_h_to_4h", "fc1":
		return SlotUp
	case "gate_up_proj":
		return SlotGateUp
	case "down_proj", "w2", "dense_4h_to_h", "fc2":
		return SlotDown
	case "c_proj":
		if attn {
			return SlotO
		}
		return SlotDown
	}
	if attn {
		return SlotAttnOther
	}
	return SlotOther
}

func splitOf(n, slot string) string {
	switch slot {
	case SlotQ:
		if strings.HasSuffix(n, "q_a_proj") {
			return SplitReplicated // MLA's down-projection is replicated (vLLM ReplicatedLinear)
		}
		return SplitColumn
	case SlotKV:
		if strings.HasSuffix(n, "kv_a_proj_with_mqa") {
			return SplitReplicated
		}
		return SplitColumn
	case SlotK, SlotV, SlotQKV, SlotGate, SlotUp, SlotGateUp:
		return SplitColumn
	case SlotO, SlotDown:
		return SplitRow
	case SlotShared:
		switch last(n) {
		case "down_proj", "w2":
			return SplitRow
		case "shared_expert_gate":
			return SplitReplicated
		}
		return SplitColumn
	case SlotExperts:
		return SplitExperts
	case SlotEmbedding, SlotHead:
		return SplitVocab
	}
	return SplitReplicated
}

func kindOf(slot, n string) string {
	switch slot {
	case SlotExperts:
		return KindRoutedExperts
	case SlotShared:
		return KindSharedExperts
	case SlotQ, SlotK, SlotV, SlotKV, SlotQKV, SlotO, SlotAttnOther:
		return KindAttention
	case SlotGate, SlotUp, SlotGateUp, SlotDown:
		return KindMLP
	case SlotRouter:
		return KindRouter
	case SlotEmbedding:
		return KindEmbedding
	case SlotHead:
		return KindHead
	case SlotNorm:
		return KindNorm
	}
	return KindOther
}
