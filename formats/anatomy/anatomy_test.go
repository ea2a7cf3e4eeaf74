package anatomy

import "testing"

func TestLocate(t *testing.T) {
	cases := []struct {
		name              string
		layer             int
		slot, kind, split string
	}{
		{"model.layers.3.self_attn.q_proj", 3, SlotQ, KindAttention, SplitColumn},
		{"model.layers.3.self_attn.k_proj", 3, SlotK, KindAttention, SplitColumn},
		{"model.layers.3.self_attn.v_proj", 3, SlotV, KindAttention, SplitColumn},
		{"model.layers.3.self_attn.o_proj", 3, SlotO, KindAttention, SplitRow},
		{"model.layers.3.self_attn.q_a_proj", 3, SlotQ, KindAttention, SplitReplicated},
		{"model.layers.3.self_attn.q_b_proj", 3, SlotQ, KindAttention, SplitColumn},
		{"model.layers.3.self_attn.kv_a_proj_with_mqa", 3, SlotKV, KindAttention, SplitReplicated},
		{"model.layers.3.self_attn.kv_b_proj", 3, SlotKV, KindAttention, SplitColumn},
		{"model.layers.3.self_attn.q_a_layernorm", 3, SlotNorm, KindNorm, SplitReplicated},
		{"model.layers.3.self_attn.sinks", 3, SlotAttnOther, KindAttention, SplitReplicated},
		{"model.layers.0.mlp.gate_proj", 0, SlotGate, KindMLP, SplitColumn},
		{"model.layers.0.mlp.up_proj", 0, SlotUp, KindMLP, SplitColumn},
		{"model.layers.0.mlp.down_proj", 0, SlotDown, KindMLP, SplitRow},
		{"model.layers.5.mlp.gate", 5, SlotRouter, KindRouter, SplitReplicated},
		{"model.layers.5.mlp.router", 5, SlotRouter, KindRouter, SplitReplicated},
		{"model.layers.5.block_sparse_moe.gate", 5, SlotRouter, KindRouter, SplitReplicated},
		{"model.layers.5.mlp.gate.e_score_correction_bias", 5, SlotRouter, KindRouter, SplitReplicated},
		{"model.layers.5.mlp.experts.17.gate_proj", 5, SlotExperts, KindRoutedExperts, SplitExperts},
		{"model.layers.5.mlp.experts.gate_up_proj", 5, SlotExperts, KindRoutedExperts, SplitExperts},
		{"model.layers.5.block_sparse_moe.experts.3.w2", 5, SlotExperts, KindRoutedExperts, SplitExperts},
		{"model.layers.5.mlp.shared_experts.down_proj", 5, SlotShared, KindSharedExperts, SplitRow},
		{"model.layers.5.mlp.shared_experts.up_proj", 5, SlotShared, KindSharedExperts, SplitColumn},
		{"model.layers.5.mlp.shared_expert_gate", 5, SlotShared, KindSharedExperts, SplitReplicated},
		{"model.layers.5.input_layernorm", 5, SlotNorm, KindNorm, SplitReplicated},
		{"model.embed_tokens", -1, SlotEmbedding, KindEmbedding, SplitVocab},
		{"lm_head", -1, SlotHead, KindHead, SplitVocab},
		{"model.norm", -1, SlotNorm, KindNorm, SplitReplicated},
		{"transformer.h.2.attn.c_attn", 2, SlotQKV, KindAttention, SplitColumn},
		{"transformer.h.2.attn.c_proj", 2, SlotO, KindAttention, SplitRow},
		{"transformer.h.2.mlp.c_proj", 2, SlotDown, KindMLP, SplitRow},
		{"transformer.wte", -1, SlotEmbedding, KindEmbedding, SplitVocab},
		{"something.else", -1, SlotOther, KindOther, SplitReplicated},
	}
	for _, c := range cases {
		p := Locate(c.name, 61)
		if p.Layer != c.layer || p.Slot != c.slot || p.Kind != c.kind || p.Split != c.split || p.Extra {
			t.Errorf("Locate(%q) = %+v, want layer %d slot %s kind %s split %s", c.name, p, c.layer, c.slot, c.kind, c.split)
		}
	}
}

func TestExtraLayers(t *testing.T) {
	for _, n := range []string{"model.layers.61.self_attn.q_a_proj", "model.layers.61.eh_proj",
		"model.layers.61.shared_head.head", "model.layers.61.mlp.experts.0.up_proj", "model.layers.61.enorm"} {
		p := Locate(n, 61)
		if !p.Extra || p.Kind != KindExtraLayers || p.Layer != 61 {
			t.Errorf("Locate(%q, 61) = %+v, want an extra layer", n, p)
		}
	}
	if p := Locate("model.layers.61.self_attn.q_a_proj", 0); p.Extra {
		t.Errorf("with num_hidden_layers unknown no layer is extra: %+v", p)
	}
	if p := Locate("model.layers.60.mlp.experts.0.up_proj", 61); p.Extra || p.Kind != KindRoutedExperts {
		t.Errorf("layer 60 of 61: %+v", p)
	}
	// Qwen3-Next's MTP block is named apart from the decoder: extra, placed
	// after the decoder's last layer.
	for n, layer := range map[string]int{"mtp.layers.0.self_attn.q_proj": 48, "mtp.layers.1.mlp.experts.3.up_proj": 49, "mtp.fc": 48, "model.mtp.norm": 48} {
		if p := Locate(n, 48); !p.Extra || p.Kind != KindExtraLayers || p.Layer != layer {
			t.Errorf("Locate(%q, 48) = %+v, want extra layer %d", n, p, layer)
		}
	}
}

// A vision or audio tower numbers its own blocks: block 31 of a 28-layer
// decoder's vision tower is no extra layer, and its modules are no
// decoder attention or MLP.
func TestTowers(t *testing.T) {
	for _, n := range []string{"visual.blocks.31.attn.qkv", "model.visual.blocks.3.mlp.fc1", "vision_tower.vision_model.encoder.layers.30.self_attn.q_proj",
		"model.vision_tower.encoder.layers.12.self_attn.k_proj", "multi_modal_projector.linear_1", "audio_tower.layers.40.fc1"} {
		if p := Locate(n, 28); p.Extra || p.Kind != KindOther {
			t.Errorf("Locate(%q, 28) = %+v, want kind other, not extra", n, p)
		}
	}
	if p := Locate("model.language_model.layers.30.self_attn.q_proj", 28); !p.Extra {
		t.Errorf("a decoder layer past num_hidden_layers under language_model: %+v", p)
	}
}

func TestParseModel(t *testing.T) {
	m, err := ParseModel([]byte(`{"model_type":"llava","text_config":{"num_hidden_layers":4,"hidden_size":512,"num_attention_heads":8,"num_key_value_heads":2},"quantization_config":{"quant_method":"fp8"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.NumHiddenLayers != 4 || m.HeadDim != 64 || m.NumKeyValueHeads != 2 || len(m.QuantizationConfig) == 0 {
		t.Fatalf("nested text_config: %+v", m)
	}
	m, err = ParseModel([]byte(`{"num_hidden_layers":6,"hidden_size":256,"num_attention_heads":4,"sliding_window":128,"layer_types":["sliding_attention","full_attention"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.NumKeyValueHeads != 4 || !m.SlidingLayer(0) || m.SlidingLayer(1) || m.SlidingLayer(2) || m.Window() != 128 {
		t.Fatalf("layer types: %+v", m)
	}
	if _, err := ParseModel([]byte(`{"num_hidden_layers":"x"}`)); err == nil {
		t.Fatal("a string layer count was accepted")
	}
}
