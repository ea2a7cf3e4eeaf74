package synth

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// llama3Split is the Split regex of Llama 3's tokenizer.json.
const llama3Split = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// tokenizerCorpus is the text the synthetic tokenizer's merges are learned from.
const tokenizerCorpus = `The weights of a quantized model are stored in blocks, and each block has a scale.
A language model reads the tokens of a sentence and predicts the next one.
The quick brown fox jumps over the lazy dog, then the dog sleeps in the sun.
Perplexity is the exponential of the mean negative log likelihood of the text.
When the activations are quantized too, the model runs faster on the hardware that supports it.
It's what we measure before we ship: the difference between the dense and the quantized model.`

// LlamaTokenizer is a tokenizer.json in Llama 3's layout (Split with Llama
// 3's regex, ByteLevel, TemplateProcessing adding <|begin_of_text|>, the
// ByteLevel decoder) for a model of vocab ids: the 256 byte-level
// characters as ids 0..255, merges learned from a fixed English text, and
// <|begin_of_text|>, <|end_of_text|> as the last two ids. vocab must be at
// least 258.
func LlamaTokenizer(vocab int) ([]byte, error) {
	if vocab < 258 {
		return nil, fmt.Errorf("synth: a byte-level tokenizer needs a vocab of at least 258, not %d", vocab)
	}
	b2r := byteLevelRunes()
	toks := map[string]int{}
	for b := range 256 {
		toks[string(b2r[b])] = b
	}
	// Words as Llama 3's split would cut them (a leading space joins the
	// word), in byte-level characters, one symbol per character.
	freq := map[string]int{}
	for _, line := range strings.Split(tokenizerCorpus, "\n") {
		for i, w := range strings.Fields(line) {
			if i > 0 {
				w = " " + w
			}
			var s strings.Builder
			for j := 0; j < len(w); j++ {
				s.WriteRune(b2r[w[j]])
			}
			freq[s.String()]++
		}
	}
	words := map[string][]string{}
	for w := range freq {
		for _, r := range w {
			words[w] = append(words[w], string(r))
		}
	}
	var merges [][2]string
	for len(toks) < min(vocab-2, 256+1000) {
		count := map[[2]string]int{}
		for w, sym := range words {
			for i := 0; i+1 < len(sym); i++ {
				count[[2]string{sym[i], sym[i+1]}] += freq[w]
			}
		}
		if len(count) == 0 {
			break
		}
		pairs := make([][2]string, 0, len(count))
		for p := range count {
			pairs = append(pairs, p)
		}
		sort.Slice(pairs, func(i, j int) bool {
			if count[pairs[i]] != count[pairs[j]] {
				return count[pairs[i]] > count[pairs[j]]
			}
			return pairs[i][0]+" "+pairs[i][1] < pairs[j][0]+" "+pairs[j][1]
		})
		best := pairs[0]
		merges = append(merges, best)
		if _, seen := toks[best[0]+best[1]]; !seen {
			toks[best[0]+best[1]] = len(toks)
		}
		for w, sym := range words {
			out := sym[:0:0]
			for i := 0; i < len(sym); i++ {
				if i+1 < len(sym) && sym[i] == best[0] && sym[i+1] == best[1] {
					out = append(out, best[0]+best[1])
					i++
				} else {
					out = append(out, sym[i])
				}
			}
			words[w] = out
		}
	}
	ms := make([]string, len(merges))
	for i, m := range merges {
		ms[i] = m[0] + " " + m[1]
	}
	bos, eos := vocab-2, vocab-1
	added := func(id int, s string) map[string]any {
		return map[string]any{"id": id, "content": s, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
	}
	f := map[string]any{
		"version":      "1.0",
		"truncation":   nil,
		"padding":      nil,
		"added_tokens": []any{added(bos, "<|begin_of_text|>"), added(eos, "<|end_of_text|>")},
		"normalizer":   nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": llama3Split}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "Sequence", "processors": []any{
			map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
			map[string]any{"type": "TemplateProcessing",
				"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<|begin_of_text|>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
				"pair":           []any{},
				"special_tokens": map[string]any{"<|begin_of_text|>": map[string]any{"id": "<|begin_of_text|>", "ids": []int{bos}, "tokens": []string{"<|begin_of_text|>"}}}},
		}},
		"decoder": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil, "end_of_word_suffix": nil,
			"fuse_unk": false, "byte_fallback": false, "ignore_merges": true, "vocab": toks, "merges": ms},
	}
	return json.MarshalIndent(f, "", "  ")
}

// byteLevelRunes is GPT-2's bytes_to_unicode.
func byteLevelRunes() [256]rune {
	var b2r [256]rune
	n := 0
	for b := range 256 {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = rune(256 + n)
			n++
		}
	}
	return b2r
}
