package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse feeds arbitrary tokenizer.json files and texts to Parse, Encode
// and Decode. A file either parses or fails with an error naming
// tokenizer.json; a text either encodes or fails with a tokenizer error,
// never a panic; every id Encode returns decodes; and where the file maps
// bytes to the byte-level alphabet with no prefix space and no added token
// shadowing a vocab id, decoding gives the text back.
func FuzzParse(f *testing.F) {
	f.Add(testFile(f, nil), "hello world, it's 2024!\n")
	f.Add(testFile(f, func(m map[string]any) { m["normalizer"] = map[string]any{"type": "NFC"} }), "héllo <|begin_of_text|> x")
	f.Add(testFile(f, func(m map[string]any) {
		m["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}
	}), "  a  b\t")
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`), "")
	f.Fuzz(func(t *testing.T, file []byte, text string) {
		if utf8.RuneCountInString(text) > 64 { // the patterns backtrack: keep each input quick
			return
		}
		tok, err := Parse(file)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "tokenizer.json: ") {
				t.Fatalf("Parse error does not name tokenizer.json: %v", err)
			}
			return
		}
		if _, err := tok.Split(text); err != nil && !strings.HasPrefix(err.Error(), "tokenizer") {
			t.Fatalf("Split error: %v", err)
		}
		for _, special := range []bool{false, true} {
			ids, err := tok.Encode(text, special)
			if err != nil {
				if !strings.HasPrefix(err.Error(), "tokenizer") {
					t.Fatalf("Encode error: %v", err)
				}
				return
			}
			back, err := tok.Decode(ids, false)
			if err != nil && strings.Contains(err.Error(), "not in the vocab") {
				t.Fatalf("Encode gave an id Decode does not know: %v", err)
			}
			if err == nil && !special && roundTrips(tok) && back != text {
				t.Fatalf("Decode(Encode(%q)) = %q", text, back)
			}
		}
	})
}

// roundTrips says whether decoding must give the text back: the bytes are
// mapped to the byte-level alphabet, no prefix space is added, and no added
// token's id is also a vocab token's.
func roundTrips(tok *Tokenizer) bool {
	mapped := false
	for _, p := range tok.pre {
		if p.addPrefixSpace {
			return false
		}
		mapped = mapped || p.byteLevel
	}
	for id, a := range tok.addedByID {
		if s, ok := tok.tokens[id]; ok && s != a.Content {
			return false
		}
	}
	return mapped
}
