package tokenizer

import (
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
)

// hit is one added token found: where, and which.
type hit struct{ at, id int }

// plainHits is the rule itself, read plainly: from the cursor, the earliest
// place any added token occurs, the longest one there; skip past it; again.
func plainHits(added []addedToken, text string) []hit {
	var out []hit
	for pos := 0; pos < len(text); {
		best, bestLen, id := -1, 0, 0
		for _, a := range added {
			j := strings.Index(text[pos:], a.Content)
			if j < 0 {
				continue
			}
			if best < 0 || pos+j < best || pos+j == best && len(a.Content) > bestLen {
				best, bestLen, id = pos+j, len(a.Content), a.ID
			}
		}
		if best < 0 {
			break
		}
		out = append(out, hit{best, id})
		pos = best + bestLen
	}
	return out
}

func scanHits(t *Tokenizer, text string) []hit {
	var out []hit
	sc := t.scanAdded(text)
	for pos := 0; pos < len(text); {
		at, tok := sc.next(pos)
		if tok == nil {
			break
		}
		out = append(out, hit{at, tok.ID})
		pos = at + len(tok.Content)
	}
	return out
}

func withAdded(contents ...string) *Tokenizer {
	t := &Tokenizer{}
	for i, c := range contents {
		t.added = append(t.added, addedToken{ID: 1000 + i, Content: c})
	}
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].Content) > len(t.added[j].Content) })
	return t
}

// The scan that remembers each added token's next place finds the same
// tokens at the same places as the plain rule, on texts dense with
// overlapping and nested added tokens.
func TestAddedScanMatchesPlainRule(t *testing.T) {
	tok := withAdded("<|a|>", "<|a|><|b|>", "<|b|>", "a", "aa", "aaa", "|>", "<|", "ab", "ba", "<|eot|>")
	alphabet := []string{"<|a|>", "<|b|>", "a", "b", "<", "|", ">", " ", "x", "<|eot|>", "é"}
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 2000 {
		var b strings.Builder
		for range r.IntN(40) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		text := b.String()
		want, got := plainHits(tok.added, text), scanHits(tok, text)
		if len(want) != len(got) {
			t.Fatalf("trial %d %q: %d hits %v, want %d %v", trial, text, len(got), got, len(want), want)
		}
		for i := range want {
			if want[i] != got[i] {
				t.Fatalf("trial %d %q: hit %d is %v, want %v", trial, text, i, got[i], want[i])
			}
		}
	}
}

// A chat transcript's worth of added tokens: 256 of them (Llama 3's count),
// 4,000 hits in 100 kB. BenchmarkAddedScanPlain is the rule read plainly.
func chatText() (*Tokenizer, string) {
	var contents []string
	for i := range 256 {
		contents = append(contents, "<|reserved_special_token_"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+string(rune('a'+i/26))+"|>")
	}
	tok := withAdded(contents...)
	var b strings.Builder
	for i := range 4000 {
		b.WriteString(contents[i%256])
		b.WriteString(" hello there, a few words of a turn ")
	}
	return tok, b.String()
}

func BenchmarkAddedScan(b *testing.B) {
	tok, text := chatText()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		scanHits(tok, text)
	}
}

func BenchmarkAddedScanPlain(b *testing.B) {
	tok, text := chatText()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		plainHits(tok.added, text)
	}
}
