package tokenizer

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// llama3Pattern is the Split regex Llama 3's tokenizer.json carries.
const llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// testFile builds a tokenizer.json of Llama 3's layout: the 256 byte-level
// characters as ids 0..255 (id = byte value), a few merges, one special token.
func testFile(t testing.TB, edit func(map[string]any)) []byte {
	t.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(byteToRune[b])] = b
	}
	merges := [][2]string{{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"}, {"o", "r"}, {"Ġw", "or"}}
	var ms []any
	for i, m := range merges {
		vocab[m[0]+m[1]] = 256 + i
		if i%2 == 0 { // both spellings of a merge occur in the wild
			ms = append(ms, m[0]+" "+m[1])
		} else {
			ms = append(ms, []string{m[0], m[1]})
		}
	}
	f := map[string]any{
		"version":      "1.0",
		"added_tokens": []any{map[string]any{"id": 263, "content": "<|begin_of_text|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}},
		"normalizer":   nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": llama3Pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "Sequence", "processors": []any{
			map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
			map[string]any{"type": "TemplateProcessing",
				"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<|begin_of_text|>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
				"special_tokens": map[string]any{"<|begin_of_text|>": map[string]any{"id": "<|begin_of_text|>", "ids": []int{263}, "tokens": []string{"<|begin_of_text|>"}}}},
		}},
		"decoder": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model":   map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil, "end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": true, "vocab": vocab, "merges": ms},
	}
	if edit != nil {
		edit(f)
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustParse(t *testing.T, b []byte) *Tokenizer {
	t.Helper()
	tok, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestLlama3Split(t *testing.T) {
	tok := mustParse(t, testFile(t, nil))
	// Worked by hand through the pattern's alternatives, first match wins.
	cases := []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"I'm don't HE'LL it's", []string{"I", "'m", " don", "'t", " HE", "'LL", " it", "'s"}},
		{"12345 abc", []string{"123", "45", " abc"}},
		{"a  b", []string{"a", " ", " b"}},
		{"hello\n\nworld", []string{"hello", "\n\n", "world"}},
		{"hi \n there", []string{"hi", " \n", " there"}},
		{"x = 3.14!!", []string{"x", " =", " ", "3", ".", "14", "!!"}},
		{"café naïve", []string{"café", " naïve"}},
		{"cafe\u0301!", []string{"cafe", "\u0301!"}},
		{"I ❤️ 🦙s", []string{"I", " ❤️", " 🦙", "s"}},
		{"你好世界 你好", []string{"你好世界", " 你好"}},
		{"hi   ", []string{"hi", "   "}},
		{"end.\n", []string{"end", ".\n"}},
	}
	for _, c := range cases {
		got, err := tok.Split(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("Split(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestGPT2Split(t *testing.T) {
	tok := mustParse(t, testFile(t, func(f map[string]any) {
		f["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	}))
	for in, want := range map[string][]string{
		"Hello world 12345": {"Hello", " world", " 12345"},
		"a  b":              {"a", " ", " b"},
		"don't!!":           {"don", "'t", "!!"},
	} {
		got, err := tok.Split(in)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("Split(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEncode(t *testing.T) {
	tok := mustParse(t, testFile(t, nil))
	cases := []struct {
		in      string
		special bool
		want    []int
	}{
		// "hello": he (0), ll (1), hell (2), hello (3). "Ġworld": Ġw (4),
		// or (5), Ġwor (6), then l and d stay bytes.
		{"hello world", true, []int{263, 259, 262, 'l', 'd'}},
		{"hello world", false, []int{259, 262, 'l', 'd'}},
		{"<|begin_of_text|>hello", false, []int{263, 259}},
		{"hell", false, []int{258}},
		{"é", false, []int{0xC3, 0xA9}},
		{" w\n", false, []int{260, '\n' + 0}},
	}
	for _, c := range cases {
		got, err := tok.Encode(c.in, c.special)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q, %v) = %v, want %v", c.in, c.special, got, c.want)
		}
	}
}

func TestIgnoreMerges(t *testing.T) {
	// "Ġwl" in the vocab without a merge reaching it: with ignore_merges the
	// whole pre-token is one id; without, the merges decide.
	edit := func(ignore bool) func(map[string]any) {
		return func(f map[string]any) {
			m := f["model"].(map[string]any)
			m["vocab"].(map[string]int)["Ġwl"] = 300
			m["ignore_merges"] = ignore
		}
	}
	for ignore, want := range map[bool][]int{true: {300}, false: {260, 'l'}} {
		got, err := mustParse(t, testFile(t, edit(ignore))).Encode(" wl", false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("ignore_merges %v: got %v, want %v", ignore, got, want)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	tok := mustParse(t, testFile(t, nil))
	for _, s := range []string{"hello world", "I'm don't HE'LL", "x = 3.14!!\n\n  ok", "café naïve 你好 🦙 ❤️", "<|begin_of_text|>hello", "\t\r\n"} {
		ids, err := tok.Encode(s, true)
		if err != nil {
			t.Fatal(err)
		}
		back, err := tok.Decode(ids, true)
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.Replace(s, "<|begin_of_text|>", "", 1); back != want {
			t.Errorf("Decode(Encode(%q)) = %q, want %q", s, back, want)
		}
		if all, _ := tok.Decode(ids, false); !strings.HasPrefix(all, "<|begin_of_text|>") {
			t.Errorf("Decode without skipping specials: %q lacks the BOS", all)
		}
	}
}

func TestRefusals(t *testing.T) {
	cases := []struct {
		edit func(map[string]any)
		want string
	}{
		{func(f map[string]any) { f["model"].(map[string]any)["type"] = "Unigram" }, `model.type "Unigram"`},
		{func(f map[string]any) { f["model"].(map[string]any)["byte_fallback"] = true }, "byte_fallback"},
		{func(f map[string]any) { f["normalizer"] = map[string]any{"type": "Lowercase"} }, `normalizer type "Lowercase"`},
		{func(f map[string]any) { f["pre_tokenizer"] = map[string]any{"type": "Metaspace"} }, `"Metaspace"`},
		{func(f map[string]any) {
			f["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": " "}, "behavior": "Isolated"}
		}, "no ByteLevel"},
		{func(f map[string]any) { f["decoder"] = map[string]any{"type": "WordPiece"} }, "decoder"},
		{func(f map[string]any) {
			f["model"].(map[string]any)["merges"] = []any{"a b c"}
		}, "model.merges[0]"},
		{func(f map[string]any) { f["added_tokens"].([]any)[0].(map[string]any)["id"] = -3 }, "negative id -3"},
		{func(f map[string]any) {
			pp := f["post_processor"].(map[string]any)["processors"].([]any)[1].(map[string]any)
			pp["special_tokens"].(map[string]any)["<|begin_of_text|>"].(map[string]any)["ids"] = []int{-1}
		}, "negative id -1"},
	}
	for _, c := range cases {
		_, err := Parse(testFile(t, c.edit))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "tokenizer.json: ") {
			t.Errorf("want an error naming tokenizer.json and %q, got %v", c.want, err)
		}
	}
}

func TestNFC(t *testing.T) {
	tok := mustParse(t, testFile(t, func(f map[string]any) { f["normalizer"] = map[string]any{"type": "NFC"} }))
	if _, err := tok.Encode("café 你好", false); err != nil {
		t.Errorf("NFC-stable text refused: %v", err)
	}
	for _, s := range []string{"cafe\u0301", "\u212B", "\u1100\u1161"} {
		if _, err := tok.Encode(s, false); err == nil || !strings.Contains(err.Error(), "NFC") {
			t.Errorf("Encode(%q) with NFC: want a refusal, got %v", s, err)
		}
	}
}

// Qwen2's layout: digits one at a time, the NFC normalizer, no post-processor tokens.
func TestQwen2Layout(t *testing.T) {
	qwen := `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	tok := mustParse(t, testFile(t, func(f map[string]any) {
		f["normalizer"] = map[string]any{"type": "NFC"}
		f["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": qwen}
		f["post_processor"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	}))
	got, err := tok.Split("in 2024, hello")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"in", " ", "2", "0", "2", "4", ",", " hello"}; !slices.Equal(got, want) {
		t.Errorf("Split = %q, want %q", got, want)
	}
	ids, err := tok.Encode("hello", true)
	if err != nil || !slices.Equal(ids, []int{259}) {
		t.Errorf("Encode with no template: %v, %v (no BOS expected)", ids, err)
	}
}

// A long run of spaces (the lookahead alternative backtracks) and a long
// text stay fast enough to be a non-issue: this is a correctness check of
// the pieces, the time is bounded by the regex's match timeout.
func TestLongInput(t *testing.T) {
	tok := mustParse(t, testFile(t, nil))
	s := "a" + strings.Repeat(" ", 20000) + "b"
	got, err := tok.Split(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", strings.Repeat(" ", 19999), " b"}; !slices.Equal(got, want) {
		t.Errorf("Split of a 20,000-space run: %d pieces, want a, 19,999 spaces, \" b\"", len(got))
	}
	long := strings.Repeat("hello world, it's 2024!\n", 5000)
	ids, err := tok.Encode(long, false)
	if err != nil {
		t.Fatal(err)
	}
	back, _ := tok.Decode(ids, false)
	if back != long {
		t.Error("round trip of a 120 kB text differs")
	}
}

// A Split pattern that backtracks badly cannot hold Encode or Split for
// long: the whole call has one budget, and running past it, whether over
// many words that each cost less or in one word that costs more, is an
// error naming the pattern.
func TestSplitBudget(t *testing.T) {
	defer func(b time.Duration) { splitBudget = b }(splitBudget)
	splitBudget = 300 * time.Millisecond
	const evil = `(\p{L}*)*\d` // each two more letters cost it about four times as much
	tok := mustParse(t, testFile(t, func(f map[string]any) {
		f["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": llama3Pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": evil}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}}
	}))
	if got, err := tok.Split("it's 12 ab"); err != nil || !slices.Equal(got, []string{"it", "'s", " ", "1", "2", " ab"}) {
		t.Fatalf("Split of a short text: %q, %v", got, err)
	}
	for _, text := range []string{
		strings.Repeat(" abcdefghijklmnopqr", 60), // many words, each well under the budget
		" abcdefghijklmnopqrstuvwxyzabcd",         // one word worth minutes
	} {
		for _, call := range []struct {
			name string
			f    func() error
		}{
			{"Split", func() error { _, err := tok.Split(text); return err }},
			{"Encode", func() error { _, err := tok.Encode(text, true); return err }},
		} {
			start := time.Now()
			err := call.f()
			took := time.Since(start)
			if err == nil || !strings.HasPrefix(err.Error(), "tokenizer") || !strings.Contains(err.Error(), strconv.Quote(evil)) {
				t.Errorf("%s of a %d-byte text: %v, want an error naming the pattern %s", call.name, len(text), err, evil)
			}
			if took > 10*splitBudget {
				t.Errorf("%s of a %d-byte text took %v, the budget is %v", call.name, len(text), took, splitBudget)
			}
		}
	}
}

// The ByteLevel pre-tokenizer's add_prefix_space prepends a space to every
// piece an earlier Split made, not to the first alone (tokenizers'
// byte_level.rs pre_tokenize works within each split).
func TestByteLevelPrefixEveryPiece(t *testing.T) {
	tok := mustParse(t, testFile(t, func(f map[string]any) {
		f["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[1].(map[string]any)["add_prefix_space"] = true
	}))
	got, err := tok.Split("hello\n\nworld")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{" hello", " \n\n", " world"}; !slices.Equal(got, want) {
		t.Errorf("Split = %q, want %q", got, want)
	}
}

// Decoded bytes that are not UTF-8 become one U+FFFD for each maximal
// invalid subsequence, as Rust's from_utf8_lossy gives them.
func TestDecodeLossy(t *testing.T) {
	tok := mustParse(t, testFile(t, nil))
	for _, c := range []struct {
		ids  []int
		want string
	}{
		{[]int{0xFF, 0xFE, 'A'}, "\uFFFD\uFFFDA"},
		{[]int{0xE2, 0x82, 'A'}, "\uFFFDA"},             // a truncated 3-byte sequence: one
		{[]int{0xF0, 0x9F, 0x98}, "\uFFFD"},             // a truncated emoji at the end
		{[]int{0xED, 0xA0, 0x80}, "\uFFFD\uFFFD\uFFFD"}, // a surrogate: no well-formed prefix
		{[]int{0xC3, 0xA9, 0xEF, 0xBF, 0xBD}, "é\uFFFD"},
	} {
		got, err := tok.Decode(c.ids, false)
		if err != nil || got != c.want {
			t.Errorf("Decode(% x) = %q, %v; want %q", c.ids, got, err, c.want)
		}
	}
}

// A merge listed twice takes its last rank, as the tokenizers' merge map
// (a HashMap filled in order) keeps it.
func TestDuplicateMergeLastRank(t *testing.T) {
	tok := mustParse(t, testFile(t, func(f map[string]any) {
		m := f["model"].(map[string]any)
		m["vocab"].(map[string]int)["el"] = 300
		m["merges"] = append(m["merges"].([]any), "e l", "h e")
	}))
	got, err := tok.Encode("hel", false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{'h', 300}; !slices.Equal(got, want) {
		t.Errorf("Encode(hel) = %v, want %v (h e ranks after e l)", got, want)
	}
}
