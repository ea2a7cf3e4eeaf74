package synth

import (
	"testing"

	"github.com/quantscope/quantscope/tokenizer"
)

func TestLlamaTokenizer(t *testing.T) {
	b, err := LlamaTokenizer(512)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if n := tok.VocabSize(); n != 512 {
		t.Errorf("vocab size %d, want 512 (the model's)", n)
	}
	text := "The model reads the tokens of a sentence."
	ids, err := tok.Encode(text, true)
	if err != nil {
		t.Fatal(err)
	}
	if ids[0] != 510 {
		t.Errorf("first id %d, want <|begin_of_text|> 510", ids[0])
	}
	// The merges learned from a corpus holding these words compress them.
	if len(ids) >= len(text)/2 {
		t.Errorf("%d ids for %d bytes: the merges do not apply", len(ids), len(text))
	}
	back, err := tok.Decode(ids, true)
	if err != nil || back != text {
		t.Errorf("round trip: %q, %v", back, err)
	}
}
