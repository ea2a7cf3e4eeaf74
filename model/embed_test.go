package model

import (
	"math"
	"runtime"
	"testing"

	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/synth"
)

// packedEmbedModels are Llamas whose embed_tokens is stored packed along
// the hidden dimension: GPTQ INT4 (v1; symmetric, and with zero points
// drawn per group) and AutoAWQ gemm INT4.
func packedEmbedModels(t *testing.T) map[string]*Model {
	s := synth.SmallLlama()
	gptq := llamaRepo(t, s, synth.LlamaWeights(s), "gptq")
	awq := synth.AWQInt4()
	embed := func(repo *synth.Repo, ts []safetensors.WriteTensor) *Model {
		m, err := openRepo(t, editRepo(t, repo, repoEdit{drop: func(n string) bool { return n == "model.embed_tokens.weight" }, add: ts}))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	sym4, err := synth.GPTQSym4("model.embed_tokens", gptq.Weights["model.embed_tokens"])
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*Model{
		"gptq int4":             embed(gptq, sym4),
		"gptq int4 zero points": embed(gptq, synth.GPTQ("model.embed_tokens", gptq.Weights["model.embed_tokens"], 4, 128)),
		"awq int4":              embed(awq, synth.AWQ("model.embed_tokens", awq.Weights["model.embed_tokens"], 128)),
	}
}

// TestPackedEmbeddingGathered: the rows Embed gathers from a GPTQ or AWQ
// embedding in windows of hidden columns (narrower than hidden, the last
// one short) equal each token's row dequantized alone, bit for bit.
func TestPackedEmbeddingGathered(t *testing.T) {
	tokens := []int{1, 17, 200, 255, 0, 42, 42, 7, 128, 3}
	for name, m := range packedEmbedModels(t) {
		mod, _ := m.c.Module("model.embed_tokens")
		if mod.Layout != scheme.LayoutGPTQ && mod.Layout != scheme.LayoutAWQ {
			t.Fatalf("%s: embed_tokens is stored %s (layout %q)", name, mod.Format, mod.Layout)
		}
		H := m.Config.Hidden
		for _, window := range []int{H, 96, 32} {
			old := embedValues
			embedValues = window * m.Config.Vocab
			h, err := m.Embed(tokens)
			embedValues = old
			if err != nil {
				t.Fatal(err)
			}
			if m.embedWindow() != H {
				t.Fatalf("default window %d, want the whole hidden size %d for this small model", m.embedWindow(), H)
			}
			for i, id := range tokens {
				row, err := scheme.Dequantize(mod, m.c, id, id+1)
				if err != nil {
					t.Fatal(err)
				}
				for c, v := range row {
					if math.Float32bits(h.Data[i*H+c]) != math.Float32bits(v) {
						t.Fatalf("%s, window %d: token %d (id %d) column %d: gathered %v, its row alone %v", name, window, i, id, c, h.Data[i*H+c], v)
					}
				}
			}
		}
	}
}

// TestPackedEmbeddingReadOncePerSequence: what Embed allocates beyond its
// output (the stored words it reads and their unpacking) is the same for
// 8 tokens and for 256: the embedding is read once a sequence, not once a
// token.
func TestPackedEmbeddingReadOncePerSequence(t *testing.T) {
	for name, m := range packedEmbedModels(t) {
		extra := func(n int) uint64 {
			tokens := make([]int, n)
			for i := range tokens {
				tokens[i] = (i * 37) % m.Config.Vocab
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			if _, err := m.Embed(tokens); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			return after.TotalAlloc - before.TotalAlloc - uint64(4*n*m.Config.Hidden)
		}
		few, many := extra(8), extra(256)
		t.Logf("%s: Embed allocates %d bytes beyond its output for 8 tokens, %d for 256", name, few, many)
		if many > few+few/2 {
			t.Fatalf("%s: Embed of 256 tokens allocates %d bytes beyond its output, of 8 tokens %d: the embedding is read per token", name, many, few)
		}
	}
}
