// Package tokenizer reads a Hugging Face tokenizer.json of the byte-level BPE
// kind that Llama 3, Qwen2 and GPT-2 ship, and turns text into token ids and
// back, as the `tokenizers` library does for those files.
//
// Supported: model.type "BPE" (merges as "a b" strings or ["a","b"] pairs,
// ignore_merges); the pre-tokenizers Split (a Regex pattern, behavior
// "Isolated", not inverted) and ByteLevel (with or without its GPT-2 regex,
// add_prefix_space), alone or in a Sequence; added tokens, special or not,
// matched in the text before pre-tokenization; the normalizer NFC or none;
// the post-processors ByteLevel and TemplateProcessing (its "single"
// template adds e.g. Llama 3's <|begin_of_text|>); the decoder ByteLevel.
//
// Refused with an error naming tokenizer.json and the field: other model
// types (Unigram, WordPiece, WordLevel), BPE with byte_fallback, dropout,
// continuing_subword_prefix or end_of_word_suffix (SentencePiece-style BPE
// such as Llama 2's), other normalizers and pre-tokenizers, added tokens
// with lstrip/rstrip/single_word. With the NFC normalizer this package does
// not carry Unicode's composition tables: text containing a character NFC
// could change (combining marks, conjoining Jamo, compatibility ideographs,
// composition exclusions) is refused rather than tokenized differently.
//
// The Split patterns use lookahead (`\s+(?!\S)`), which Go's regexp lacks;
// they run on github.com/dlclark/regexp2, a backtracking engine with .NET
// syntax whose \p{L}, \p{N}, \s and (?i:) agree with the Oniguruma engine
// the tokenizers library uses for these patterns.
package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/dlclark/regexp2"
)

// Tokenizer encodes text to ids and decodes ids to text.
type Tokenizer struct {
	vocab        map[string]int
	tokens       map[int]string // id → vocab string (byte-level characters)
	ranks        map[pair]int
	ignoreMerges bool
	added        []addedToken // longest content first
	addedByID    map[int]addedToken
	nfc          bool
	pre          []preTokenizer
	prefix       []int // ids the post-processor puts before the text
	suffix       []int // ... and after it
	cache        map[string][]int
}

type pair struct{ a, b string }

type addedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// preTokenizer splits one piece of text into pieces; byteLevel marks the
// step that maps bytes to the byte-level alphabet.
type preTokenizer struct {
	split          *regexp2.Regexp // nil: no split
	byteLevel      bool
	addPrefixSpace bool
}

// gpt2Pattern is ByteLevel's own split when use_regex is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

type rawFile struct {
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         struct {
		Type                    string            `json:"type"`
		Dropout                 *float64          `json:"dropout"`
		ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
		ByteFallback            bool              `json:"byte_fallback"`
		IgnoreMerges            bool              `json:"ignore_merges"`
		Vocab                   map[string]int    `json:"vocab"`
		Merges                  []json.RawMessage `json:"merges"`
	} `json:"model"`
}

func errf(format string, a ...any) error {
	return fmt.Errorf("tokenizer.json: "+format, a...)
}

func isNull(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || string(b) == "null"
}

// Parse reads a tokenizer.json.
func Parse(b []byte) (*Tokenizer, error) {
	var r rawFile
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, errf("%v", err)
	}
	m := r.Model
	switch {
	case m.Type != "BPE" && m.Type != "":
		return nil, errf("model.type %q: only byte-level BPE (Llama 3, Qwen2, GPT-2) is supported", m.Type)
	case m.Type == "" && m.Vocab == nil:
		return nil, errf("model: no BPE vocab")
	case m.ByteFallback:
		return nil, errf("model.byte_fallback: SentencePiece-style BPE (Llama 2) is not supported, only byte-level BPE")
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, errf("model.dropout %v: BPE dropout is a training option, not supported", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return nil, errf("model.continuing_subword_prefix is not supported")
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, errf("model.end_of_word_suffix is not supported")
	}
	t := &Tokenizer{vocab: m.Vocab, tokens: make(map[int]string, len(m.Vocab)), ranks: make(map[pair]int, len(m.Merges)),
		ignoreMerges: m.IgnoreMerges, addedByID: map[int]addedToken{}, cache: map[string][]int{}}
	for s, id := range m.Vocab {
		if id < 0 {
			return nil, errf("model.vocab: token %q has negative id %d", s, id)
		}
		if prev, dup := t.tokens[id]; dup {
			return nil, errf("model.vocab: id %d is given to both %q and %q", id, prev, s)
		}
		t.tokens[id] = s
	}
	for i, raw := range m.Merges {
		var p pair
		var s string
		var two []string
		if json.Unmarshal(raw, &s) == nil {
			a, b, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(b, " ") {
				return nil, errf("model.merges[%d] %q: want two tokens separated by one space", i, s)
			}
			p = pair{a, b}
		} else if json.Unmarshal(raw, &two) == nil && len(two) == 2 {
			p = pair{two[0], two[1]}
		} else {
			return nil, errf("model.merges[%d]: want \"a b\" or [\"a\", \"b\"], got %s", i, raw)
		}
		if _, ok := m.Vocab[p.a+p.b]; !ok {
			return nil, errf("model.merges[%d] (%q, %q): the merged token %q is not in the vocab", i, p.a, p.b, p.a+p.b)
		}
		t.ranks[p] = i // a pair listed twice takes its last rank, as the tokenizers' merge map does
	}
	for i, a := range r.AddedTokens {
		if a.SingleWord || a.LStrip || a.RStrip {
			return nil, errf("added_tokens[%d] %q: single_word, lstrip and rstrip are not supported", i, a.Content)
		}
		if a.Content == "" {
			return nil, errf("added_tokens[%d]: empty content", i)
		}
		if a.ID < 0 {
			return nil, errf("added_tokens[%d] %q: negative id %d", i, a.Content, a.ID)
		}
		if s, ok := t.tokens[a.ID]; ok && s != a.Content {
			// The vocab may hold it under the same content; a different one is a conflict.
			return nil, errf("added_tokens[%d] %q: id %d is the vocab's %q", i, a.Content, a.ID, s)
		}
		t.added = append(t.added, a)
		t.addedByID[a.ID] = a
	}
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].Content) > len(t.added[j].Content) })
	var err error
	if t.nfc, err = parseNormalizer(r.Normalizer); err != nil {
		return nil, err
	}
	if t.pre, err = parsePre(r.PreTokenizer, "pre_tokenizer"); err != nil {
		return nil, err
	}
	if !hasByteLevel(t.pre) {
		return nil, errf("pre_tokenizer: no ByteLevel step; only byte-level BPE is supported")
	}
	if t.prefix, t.suffix, err = parsePost(r.PostProcessor, "post_processor"); err != nil {
		return nil, err
	}
	if !isNull(r.Decoder) {
		var d struct{ Type string }
		if err := json.Unmarshal(r.Decoder, &d); err != nil || d.Type != "ByteLevel" {
			return nil, errf("decoder %s: only the ByteLevel decoder is supported", r.Decoder)
		}
	}
	return t, nil
}

func hasByteLevel(p []preTokenizer) bool {
	for _, s := range p {
		if s.byteLevel {
			return true
		}
	}
	return false
}

func parseNormalizer(raw json.RawMessage) (bool, error) {
	if isNull(raw) {
		return false, nil
	}
	var n struct {
		Type        string
		Normalizers []json.RawMessage
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return false, errf("normalizer: %v", err)
	}
	switch n.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		nfc := false
		for _, s := range n.Normalizers {
			v, err := parseNormalizer(s)
			if err != nil {
				return false, err
			}
			nfc = nfc || v
		}
		return nfc, nil
	}
	return false, errf("normalizer type %q is not supported (only NFC or none)", n.Type)
}

func parsePre(raw json.RawMessage, field string) ([]preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var p struct {
		Type           string
		Pretokenizers  []json.RawMessage
		Pattern        map[string]string
		Behavior       string
		Invert         bool
		AddPrefixSpace bool  `json:"add_prefix_space"`
		UseRegex       *bool `json:"use_regex"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, errf("%s: %v", field, err)
	}
	switch p.Type {
	case "Sequence":
		var out []preTokenizer
		for i, s := range p.Pretokenizers {
			v, err := parsePre(s, fmt.Sprintf("%s.pretokenizers[%d]", field, i))
			if err != nil {
				return nil, err
			}
			out = append(out, v...)
		}
		return out, nil
	case "Split":
		if p.Behavior != "Isolated" || p.Invert {
			return nil, errf("%s: Split with behavior %q, invert %v: only Isolated, not inverted, is supported", field, p.Behavior, p.Invert)
		}
		pat, ok := p.Pattern["Regex"]
		if !ok {
			if s, isStr := p.Pattern["String"]; isStr {
				pat = regexp2.Escape(s)
			} else {
				return nil, errf("%s: Split pattern %v: want {\"Regex\": ...} or {\"String\": ...}", field, p.Pattern)
			}
		}
		re, err := compile(pat)
		if err != nil {
			return nil, errf("%s: Split pattern %q: %v", field, pat, err)
		}
		return []preTokenizer{{split: re}}, nil
	case "ByteLevel":
		var out []preTokenizer
		if p.UseRegex == nil || *p.UseRegex {
			re, err := compile(gpt2Pattern)
			if err != nil {
				return nil, err
			}
			out = append(out, preTokenizer{split: re})
		}
		out = append(out, preTokenizer{byteLevel: true, addPrefixSpace: p.AddPrefixSpace})
		if p.AddPrefixSpace && len(out) == 2 { // the prefix space goes in before the split
			out[0].addPrefixSpace, out[1].addPrefixSpace = true, false
		}
		return out, nil
	}
	return nil, errf("%s: pre-tokenizer type %q is not supported (Split, ByteLevel, Sequence)", field, p.Type)
}

// splitBudget and splitPerByte bound the time one Encode or Split spends
// matching the pre-tokenizers' patterns: the budget plus so much a byte of
// its text. The patterns tokenizer.json files ship take about a microsecond
// a byte; one that backtracks (`(\p{L}*)*\d`) costs four times as much for
// every two more letters of a word, minutes for a text of such words. A
// call stops before its next match once its budget is spent, and one match
// is cut off after splitBudget, so a call ends within about twice its
// budget. Variables so tests can shorten them; a pattern takes the value
// of splitBudget when it is compiled.
var (
	splitBudget  = 5 * time.Second
	splitPerByte = 10 * time.Microsecond
)

// splitDeadline is when a call over text must be done matching.
func splitDeadline(text string) time.Time {
	return time.Now().Add(splitBudget + time.Duration(len(text))*splitPerByte)
}

func compile(pat string) (*regexp2.Regexp, error) {
	re, err := regexp2.Compile(pat, regexp2.None)
	if err != nil {
		return nil, err
	}
	// Set once here, never per call: a Tokenizer's patterns are shared.
	re.MatchTimeout = splitBudget
	return re, nil
}

func parsePost(raw json.RawMessage, field string) (prefix, suffix []int, err error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	var p struct {
		Type          string
		Processors    []json.RawMessage
		Single        []map[string]struct{ ID string }
		SpecialTokens map[string]struct{ IDs []int } `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, errf("%s: %v", field, err)
	}
	switch p.Type {
	case "ByteLevel":
		return nil, nil, nil
	case "Sequence":
		for i, s := range p.Processors {
			a, b, err := parsePost(s, fmt.Sprintf("%s.processors[%d]", field, i))
			if err != nil {
				return nil, nil, err
			}
			prefix, suffix = append(prefix, a...), append(suffix, b...)
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		seen := false
		for _, item := range p.Single {
			if _, ok := item["Sequence"]; ok {
				seen = true
				continue
			}
			st, ok := item["SpecialToken"]
			if !ok {
				return nil, nil, errf("%s: template item %v: want SpecialToken or Sequence", field, item)
			}
			tok, ok := p.SpecialTokens[st.ID]
			if !ok {
				return nil, nil, errf("%s: template names special token %q, which special_tokens does not list", field, st.ID)
			}
			for _, id := range tok.IDs {
				if id < 0 {
					return nil, nil, errf("%s: special token %q has negative id %d", field, st.ID, id)
				}
			}
			if seen {
				suffix = append(suffix, tok.IDs...)
			} else {
				prefix = append(prefix, tok.IDs...)
			}
		}
		return prefix, suffix, nil
	}
	return nil, nil, errf("%s: post-processor type %q is not supported (ByteLevel, TemplateProcessing, Sequence)", field, p.Type)
}

// VocabSize is one more than the largest id the tokenizer can produce.
func (t *Tokenizer) VocabSize() int {
	n := 0
	for id := range t.tokens {
		n = max(n, id+1)
	}
	for id := range t.addedByID {
		n = max(n, id+1)
	}
	return n
}
