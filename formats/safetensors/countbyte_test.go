package safetensors

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// countByteSWAR (the page's engine's count) against strings.Count: every
// byte value as the one counted, in strings of every byte value, at every
// length and alignment up to a few words.
func TestCountByteSWAR(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for c := range 256 {
		for n := range 40 {
			b := make([]byte, n)
			for i := range b {
				switch rng.IntN(4) {
				case 0:
					b[i] = byte(c)
				case 1:
					b[i] = byte(c) ^ 0x80
				case 2:
					b[i] = byte(c) + 1
				default:
					b[i] = byte(rng.IntN(256))
				}
			}
			s := string(b)
			for off := 0; off <= min(n, 8); off++ {
				if got, want := countByteSWAR(s[off:], byte(c)), strings.Count(s[off:], string([]byte{byte(c)})); got != want {
					t.Fatalf("count %#x in %q: %d, want %d", c, s[off:], got, want)
				}
			}
		}
	}
}

// CountByte, whichever way this platform counts, for every byte value.
func TestCountByte(t *testing.T) {
	for c := range 256 {
		s := strings.Repeat(string([]byte{byte(c), byte(c) + 2, byte(c) ^ 1}), 5)
		if got := CountByte(s, byte(c)); got != 5 {
			t.Fatalf("CountByte(%q, %#x) = %d, want 5", s, c, got)
		}
	}
}
