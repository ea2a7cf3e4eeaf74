package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/quantscope/quantscope/model"
	"github.com/quantscope/quantscope/tokenizer"
)

// encodeText tokenizes text with the model repo's tokenizer.json, the
// post-processor's tokens (Llama 3's <|begin_of_text|>) included, as the
// tokenizers library's encode does by default.
func encodeText(ctx context.Context, m *model.Model, text string) ([]int, *tokenizer.Tokenizer, error) {
	tok, err := tokenizer.Load(ctx, m.Checkpoint().Source)
	if errors.Is(err, tokenizer.ErrNoTokenizer) {
		return nil, nil, fmt.Errorf("%w: give token ids with --tokens instead of --text", err)
	}
	if err != nil {
		return nil, nil, err
	}
	ids, err := tok.Encode(text, true)
	if err != nil {
		return nil, nil, fmt.Errorf("--text: %w", err)
	}
	return ids, tok, nil
}

// textLines splits a text file's bytes into its non-blank lines.
func textLines(path string, b []byte) ([]string, error) {
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if strings.TrimSpace(line) != "" {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no text lines", path)
	}
	return out, nil
}

// encodeLines tokenizes each line with the model's tokenizer.json.
func encodeLines(ctx context.Context, m *model.Model, lines []string, path string) ([][]int, error) {
	tok, err := tokenizer.Load(ctx, m.Checkpoint().Source)
	if errors.Is(err, tokenizer.ErrNoTokenizer) {
		return nil, fmt.Errorf("%w: give a file of token id lines with --data instead of --text", err)
	}
	if err != nil {
		return nil, err
	}
	seqs := make([][]int, len(lines))
	for i, l := range lines {
		if seqs[i], err = tok.Encode(l, true); err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", path, i+1, err)
		}
	}
	return seqs, nil
}
