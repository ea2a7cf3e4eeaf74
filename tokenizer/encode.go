package tokenizer

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// byteToRune is GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for
// themselves, the others for U+0100 onwards in byte order.
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := map[rune]byte{}
	n := 0
	for b := range 256 {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = rune(256 + n)
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

// Encode turns text into token ids; with addSpecial the post-processor's
// tokens (Llama 3's <|begin_of_text|>) are added around it, as the
// tokenizers library's encode(text) does by default.
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]int, error) {
	if !utf8.ValidString(text) {
		return nil, fmt.Errorf("tokenizer: the text is not valid UTF-8")
	}
	if t.nfc {
		if err := nfcStable(text); err != nil {
			return nil, err
		}
	}
	var ids []int
	if addSpecial {
		ids = append(ids, t.prefix...)
	}
	deadline := splitDeadline(text) // one budget for the whole text
	sc := t.scanAdded(text)
	for pos := 0; pos < len(text); {
		at, tok := sc.next(pos)
		if at > pos {
			enc, err := t.encodePlain(text[pos:at], deadline)
			if err != nil {
				return nil, err
			}
			ids = append(ids, enc...)
		}
		if tok == nil {
			break
		}
		ids = append(ids, tok.ID)
		pos = at + len(tok.Content)
	}
	if addSpecial {
		ids = append(ids, t.suffix...)
	}
	return ids, nil
}

// addedScan finds a text's added tokens left to right. It keeps each added
// token's next occurrence, searching again only for those the cursor has
// passed, so the text is read about once per added token; searching the
// whole rest for every added token at every hit made a text with many of
// them (a chat transcript: hundreds of added tokens, thousands of hits)
// cost hits × tokens × length.
type addedScan struct {
	t    *Tokenizer
	text string
	at   []int // per t.added: its first occurrence at or after the cursor, -1 none left, -2 not searched
}

func (t *Tokenizer) scanAdded(text string) *addedScan {
	at := make([]int, len(t.added))
	for i := range at {
		at[i] = -2
	}
	return &addedScan{t: t, text: text, at: at}
}

// next is the earliest added token at or after pos (the longest one at that
// place); at is len(text) and tok nil when there is none. pos never goes back.
func (s *addedScan) next(pos int) (at int, tok *addedToken) {
	at = len(s.text)
	for i := range s.t.added { // longest first: at one place the longest wins
		a := &s.t.added[i]
		if s.at[i] == -2 || (s.at[i] >= 0 && s.at[i] < pos) {
			s.at[i] = -1
			if j := strings.Index(s.text[pos:], a.Content); j >= 0 {
				s.at[i] = pos + j
			}
		}
		if j := s.at[i]; j >= 0 && (tok == nil || j < at) {
			at, tok = j, a
		}
	}
	return at, tok
}

// encodePlain runs the pre-tokenizers and BPE over text with no added
// tokens, its matching done by deadline.
func (t *Tokenizer) encodePlain(text string, deadline time.Time) ([]int, error) {
	pieces := []string{text}
	mapped := false
	for _, p := range t.pre {
		if p.addPrefixSpace {
			// every piece, as the ByteLevel pre-tokenizer prepends within
			// each split an earlier pre-tokenizer made (byte_level.rs)
			for i, s := range pieces {
				if !strings.HasPrefix(s, " ") {
					pieces[i] = " " + s
				}
			}
		}
		if p.split != nil {
			var out []string
			for _, s := range pieces {
				parts, err := splitIsolated(p, s, deadline)
				if err != nil {
					return nil, err
				}
				out = append(out, parts...)
			}
			pieces = out
		}
		if p.byteLevel && !mapped {
			for i, s := range pieces {
				pieces[i] = byteLevel(s)
			}
			mapped = true
		}
	}
	var ids []int
	for _, w := range pieces {
		enc, err := t.bpe(w)
		if err != nil {
			return nil, err
		}
		ids = append(ids, enc...)
	}
	return ids, nil
}

// splitIsolated cuts s into the pattern's matches and the text between
// them, starting no match after deadline.
func splitIsolated(p preTokenizer, s string, deadline time.Time) ([]string, error) {
	if time.Now().After(deadline) {
		return nil, p.overBudget()
	}
	runes := []rune(s)
	var out []string
	last := 0
	m, err := p.split.FindRunesMatch(runes)
	for ; m != nil && err == nil; m, err = p.split.FindNextMatch(m) {
		if time.Now().After(deadline) {
			return nil, p.overBudget()
		}
		if m.Length == 0 {
			continue
		}
		if m.Index > last {
			out = append(out, string(runes[last:m.Index]))
		}
		out = append(out, string(runes[m.Index:m.Index+m.Length]))
		last = m.Index + m.Length
	}
	if err != nil { // regexp2 fails a match that runs past MatchTimeout, quoting all the input
		if strings.HasPrefix(err.Error(), "match timeout") {
			return nil, p.overBudget()
		}
		return nil, fmt.Errorf("tokenizer: pre-tokenizer Split pattern %q: %v", p.split.String(), err)
	}
	if last < len(runes) {
		out = append(out, string(runes[last:]))
	}
	return out, nil
}

// overBudget is the error of a call that spent its budget in p's pattern.
func (p preTokenizer) overBudget() error {
	return fmt.Errorf("tokenizer: pre-tokenizer Split pattern %q: matching the text took longer than one call may (%v and %v a byte); the pattern backtracks",
		p.split.String(), splitBudget, splitPerByte)
}

// Split returns the pieces the pre-tokenizers cut text into, before the
// byte-level mapping (what a test compares with the tokenizers library's
// pre_tokenize_str).
func (t *Tokenizer) Split(text string) ([]string, error) {
	pieces := []string{text}
	deadline := splitDeadline(text) // one budget for the whole text
	for _, p := range t.pre {
		if p.addPrefixSpace {
			// every piece, as the ByteLevel pre-tokenizer prepends within
			// each split an earlier pre-tokenizer made (byte_level.rs)
			for i, s := range pieces {
				if !strings.HasPrefix(s, " ") {
					pieces[i] = " " + s
				}
			}
		}
		if p.split == nil {
			continue
		}
		var out []string
		for _, s := range pieces {
			parts, err := splitIsolated(p, s, deadline)
			if err != nil {
				return nil, err
			}
			out = append(out, parts...)
		}
		pieces = out
	}
	return pieces, nil
}

func byteLevel(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteRune(byteToRune[s[i]])
	}
	return b.String()
}

// bpe merges one pre-token (in byte-level characters) by merge rank.
func (t *Tokenizer) bpe(w string) ([]int, error) {
	if ids, ok := t.cache[w]; ok {
		return ids, nil
	}
	if id, ok := t.vocab[w]; ok && (t.ignoreMerges || utf8.RuneCountInString(w) == 1) {
		return []int{id}, nil
	}
	var sym []string
	for _, r := range w {
		sym = append(sym, string(r))
	}
	for len(sym) > 1 {
		best, at := -1, -1
		for i := 0; i+1 < len(sym); i++ {
			if r, ok := t.ranks[pair{sym[i], sym[i+1]}]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		// Merge every occurrence of the best pair, left to right.
		a, b := sym[at], sym[at+1]
		out := sym[:0:0]
		for i := 0; i < len(sym); i++ {
			if i+1 < len(sym) && sym[i] == a && sym[i+1] == b {
				out = append(out, a+b)
				i++
			} else {
				out = append(out, sym[i])
			}
		}
		sym = out
	}
	ids := make([]int, len(sym))
	for i, s := range sym {
		id, ok := t.vocab[s]
		if !ok {
			return nil, fmt.Errorf("tokenizer: the piece %q has no token in the vocab (no unk token in byte-level BPE)", s)
		}
		ids[i] = id
	}
	if len(t.cache) < 1<<16 {
		t.cache[w] = ids
	}
	return ids, nil
}

// Decode turns ids back into text; special added tokens are left out when
// skipSpecial is set.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) (string, error) {
	var b []byte
	for _, id := range ids {
		if a, ok := t.addedByID[id]; ok {
			if !(skipSpecial && a.Special) {
				b = append(b, a.Content...)
			}
			continue
		}
		s, ok := t.tokens[id]
		if !ok {
			return "", fmt.Errorf("tokenizer: id %d is not in the vocab", id)
		}
		for _, r := range s {
			c, ok := runeToByte[r]
			if !ok {
				return "", fmt.Errorf("tokenizer: token %d %q holds %q, not a byte-level character", id, s, r)
			}
			b = append(b, c)
		}
	}
	return lossyUTF8(b), nil
}

// lossyUTF8 is b as text with one U+FFFD for each maximal invalid
// subsequence (Rust's String::from_utf8_lossy, which the tokenizers'
// decoder uses): ff fe 41 is "\uFFFD\uFFFDA", a truncated e2 82 41 is
// "\uFFFDA" (strings.ToValidUTF8 folds a whole run of invalid bytes
// into one).
func lossyUTF8(b []byte) string {
	var sb strings.Builder
	sb.Grow(len(b))
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r != utf8.RuneError || n > 1 {
			sb.Write(b[:n])
		} else {
			n = maximalSubpart(b)
			sb.WriteRune(utf8.RuneError)
		}
		b = b[n:]
	}
	return sb.String()
}

// maximalSubpart is the length of the longest prefix of b that starts a
// well-formed UTF-8 sequence without completing it (at least 1): the bytes
// one U+FFFD stands for (Unicode's table of well-formed byte sequences).
func maximalSubpart(b []byte) int {
	lo, hi := byte(0x80), byte(0xBF)
	need := 0
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	i := 1
	for ; i <= need && i < len(b) && b[i] >= lo && b[i] <= hi; i++ {
		lo, hi = 0x80, 0xBF
	}
	return i
}

// TokenString is the text of one id (for showing top-k tokens): its decoded
// bytes, or an added token's content.
func (t *Tokenizer) TokenString(id int) string {
	s, err := t.Decode([]int{id}, false)
	if err != nil {
		return ""
	}
	return s
}

// nfcStable refuses text that NFC normalization could change: the package
// has no composition tables, so rather than skip NFC it accepts only text
// without combining marks, conjoining Jamo, singletons and composition
// exclusions (the characters whose NFC form differs or may differ).
func nfcStable(text string) error {
	for i, r := range text {
		if unicode.Is(unicode.M, r) || inRanges(r, nfcUnstable) {
			return fmt.Errorf("tokenizer: character %U %q at byte %d: the tokenizer's NFC normalizer could change it, and this package does not implement NFC composition", r, r, i)
		}
	}
	return nil
}

// nfcUnstable holds the NFC_Quick_Check No/Maybe characters that are not
// combining marks: singletons (U+212B ANGSTROM SIGN → U+00C5), composition
// exclusions, Hangul conjoining Jamo, compatibility ideographs.
var nfcUnstable = [][2]rune{
	{0x0340, 0x0344}, {0x0374, 0x0374}, {0x037E, 0x037E}, {0x0387, 0x0387},
	{0x0958, 0x095F}, {0x09DC, 0x09DF}, {0x0A33, 0x0A36}, {0x0A59, 0x0A5E},
	{0x0B5C, 0x0B5D}, {0x0F43, 0x0FB9}, {0x1100, 0x11FF}, {0x1F00, 0x1FFF},
	{0x2000, 0x2001}, {0x2126, 0x2126}, {0x212A, 0x212B}, {0x2329, 0x232A},
	{0x2ADC, 0x2ADC}, {0xF900, 0xFAFF}, {0xFB1D, 0xFB4E}, {0x1D15E, 0x1D1C0},
	{0x2F800, 0x2FA1F},
}

func inRanges(r rune, rs [][2]rune) bool {
	for _, x := range rs {
		if x[0] <= r && r <= x[1] {
			return true
		}
	}
	return false
}
