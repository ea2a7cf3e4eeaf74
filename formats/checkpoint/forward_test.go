package checkpoint

import (
	"strings"
	"testing"

	"github.com/quantscope/quantscope/synth"
)

// The inventory's forward section says what the companion's forward can run,
// as the forward itself decides it: a Llama decoder; W4A only when every
// projection of every decoder layer is GPTQ INT4 of the kind W4A takes (the
// first that is not named); text only with a tokenizer.json.
func TestForwardInfo(t *testing.T) {
	s := synth.SmallLlama()
	gptq, err := synth.LlamaRepo(s, synth.LlamaWeights(s), "gptq")
	if err != nil {
		t.Fatal(err)
	}
	dense, err := synth.LlamaRepo(s, synth.LlamaWeights(s), "bf16")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		repo      *synth.Repo
		llama     bool
		refused   string // a part of w4a_refused, "" when W4A can run
		tokenizer bool
	}{
		{gptq, true, "", true},
		{dense, true, "model.layers.0.self_attn.q_proj: stored bf16", true},
		{synth.GPTQInt4(), true, "sym false", false},
		{synth.GPTOSSMXFP4(), false, "stored bf16", false},
		{synth.DeepSeekFP8(), false, "self_attn.q_proj: no such module", false}, // MLA: q_a_proj, q_b_proj
	} {
		f := load(t, c.repo).Inventory().Forward
		_, hasTok := c.repo.Files["tokenizer.json"]
		if f.Llama != c.llama || f.Tokenizer != hasTok || f.Tokenizer != c.tokenizer ||
			(c.refused == "") != (f.W4ARefused == "") || !strings.Contains(f.W4ARefused, c.refused) {
			t.Errorf("%s: %+v", c.repo.ID, f)
		}
	}
}
