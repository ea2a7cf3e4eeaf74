package tokenizer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/quantscope/quantscope/formats/hub"
)

// MaxFile bounds the tokenizer.json read from a source (Llama 3's is 9 MB,
// Qwen2's 7 MB).
const MaxFile = 64 << 20

// ErrNoTokenizer is Load's error for a repo without a tokenizer.json: the
// caller says how to give token ids instead (its flag or field).
var ErrNoTokenizer = errors.New("no tokenizer.json to tokenize text with")

// Load reads and parses src's tokenizer.json; an absent one is an error
// wrapping ErrNoTokenizer.
func Load(ctx context.Context, src hub.Source) (*Tokenizer, error) {
	b, err := src.ReadFile(ctx, "tokenizer.json", MaxFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", src.Name(), ErrNoTokenizer)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: tokenizer.json: %w", src.Name(), err)
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.Name(), err)
	}
	return t, nil
}
