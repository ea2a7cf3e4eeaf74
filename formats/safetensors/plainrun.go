package safetensors

import "math/bits"

// PlainRun returns the index of the first byte at or after i in s that ends
// a run of plain JSON string text: a quote, a backslash, a control
// character (below 0x20) or a byte outside ASCII; len(s) when none does.
// It tests eight bytes at a time: tensor names are most of a header's bytes
// and of an index's, and a byte at a time was a tenth of `inspect`'s CPU.
func PlainRun(s string, i int) int {
	const lows, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(s); i += 8 {
		w := load64(s, i)
		// A byte's high bit in m is set where the byte is below 0x20
		// (subtracting 0x20 borrows and the byte had no high bit), equals
		// '"' or '\\' (xor makes it zero, and subtracting 1 borrows), or
		// has its own high bit set. A borrow can set the bit of a byte
		// above a match, never below one, so the lowest bit is exact.
		q, b := w^(lows*'"'), w^(lows*'\\')
		m := ((w-lows*0x20)&^w | (q-lows)&^q | (b-lows)&^b | w) & highs
		if m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return i
		}
	}
	return len(s)
}

// load64 reads eight bytes of s at i, little-endian (one load: the
// compiler merges these).
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}
