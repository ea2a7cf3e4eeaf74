package safetensors

import "math/bits"

// PlainRun returns the index of the first byte at or after i in s that ends
// a run of plain JSON string text: a quote, a backslash, a control
// character (below 0x20) or a byte outside ASCII; len(s) when none does.
// It tests eight bytes at a time: tensor names are most of a header's bytes
// and of an index's, and a byte at a time was a tenth of `inspect`'s CPU.
func PlainRun(s string, i int) int { return plainRun(s, i, false) }

// PlainRunHTML is PlainRun that also stops at '<', '>' and '&', which
// encoding/json writes escaped: the end of what a JSON writer copies as it
// is.
func PlainRunHTML(s string, i int) int { return plainRun(s, i, true) }

func plainRun(s string, i int, html bool) int {
	const lows, highs = 0x0101010101010101, 0x8080808080808080
	// zero sets the high bit of the lowest byte of v that is 0, and maybe
	// of bytes above it (subtracting 1 borrows through a zero byte), never
	// of one below it.
	zero := func(v uint64) uint64 { return (v - lows) &^ v }
	for ; i+8 <= len(s); i += 8 {
		w := load64(s, i)
		// A byte's high bit in m is set where the byte is below 0x20
		// (subtracting 0x20 borrows and the byte had no high bit), equals
		// a stop byte (xor makes it zero), or has its own high bit set.
		// A borrow can set the bit of a byte above a match, never below
		// one, so the lowest bit is exact.
		m := (w-lows*0x20)&^w | zero(w^(lows*'"')) | zero(w^(lows*'\\')) | w
		if html {
			m |= zero(w^(lows*'<')) | zero(w^(lows*'>')) | zero(w^(lows*'&'))
		}
		if m &= highs; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 || html && (c == '<' || c == '>' || c == '&') {
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
