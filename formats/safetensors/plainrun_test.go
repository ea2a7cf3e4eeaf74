package safetensors

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// plainRunByByte is PlainRun (html: PlainRunHTML) written plainly, a
// byte at a time.
func plainRunByByte(s string, i int, html bool) int {
	for ; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return i
		}
		if html && (c == '<' || c == '>' || c == '&') {
			return i
		}
	}
	return len(s)
}

// both checks PlainRun and PlainRunHTML against the plain loop.
func both(t *testing.T, s string, start int, what func() string) {
	t.Helper()
	if got, want := PlainRun(s, start), plainRunByByte(s, start, false); got != want {
		t.Fatalf("PlainRun %s: got %d, want %d", what(), got, want)
	}
	if got, want := PlainRunHTML(s, start), plainRunByByte(s, start, true); got != want {
		t.Fatalf("PlainRunHTML %s: got %d, want %d", what(), got, want)
	}
}

// Every byte value, at every position of a word and after every other
// byte value (a borrow from the byte below must not hide or fake a stop),
// from every start.
func TestPlainRunAgreesByteByByte(t *testing.T) {
	for stop := range 256 {
		for before := range 256 {
			for pos := range 9 {
				b := []byte(strings.Repeat("a", 20))
				b[pos+1] = byte(before)
				b[pos+2] = byte(stop)
				s := string(b)
				for start := range 4 {
					both(t, s, start, func() string { return fmt.Sprintf("stop %#x after %#x at %d, from %d", stop, before, pos+2, start) })
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("model.layers.0_weight\"\\\x00\x1f\x20\x7f\x80\xc3\xa9\xff<>&")
	for range 20000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			if rng.IntN(6) == 0 {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			} else {
				b[i] = 'a' + byte(rng.IntN(26))
			}
		}
		s := string(b)
		for start := 0; start <= len(s); start++ {
			both(t, s, start, func() string { return fmt.Sprintf("%q from %d", s, start) })
		}
	}
}

func BenchmarkPlainRun(b *testing.B) {
	name := `model.layers.42.mlp.experts.117.down_proj.weight_scale_2"`
	b.SetBytes(int64(len(name)))
	for b.Loop() {
		if PlainRun(name, 0) != len(name)-1 {
			b.Fatal("wrong stop")
		}
	}
}

func BenchmarkPlainRunByByte(b *testing.B) {
	name := `model.layers.42.mlp.experts.117.down_proj.weight_scale_2"`
	b.SetBytes(int64(len(name)))
	for b.Loop() {
		if plainRunByByte(name, 0, false) != len(name)-1 {
			b.Fatal("wrong stop")
		}
	}
}
