package safetensors

import "math/bits"

// CountByte counts c in s. Headers and indexes are sized by a count of one
// byte before they are read (how many entries they can hold): on amd64 and
// arm64 strings.Count does it with vector instructions, while on wasm, the
// page's engine, it is a loop a byte at a time that took a tenth of the
// engine's time; there it is countByteSWAR (countbyte_wasm.go).
func CountByte(s string, c byte) int { return countByte(s, c) }

// countByteSWAR counts c in s eight bytes at a time.
func countByteSWAR(s string, c byte) int {
	const lows, highs, sevens = 0x0101010101010101, 0x8080808080808080, 0x7f7f7f7f7f7f7f7f
	n, i := 0, 0
	for ; i+8 <= len(s); i += 8 {
		v := load64(s, i) ^ (lows * uint64(c))
		// A byte's high bit in t is set unless the byte is 0: its low
		// seven bits plus 0x7f carry into the high bit (and never into
		// the next byte), and its own high bit is kept.
		t := (v&sevens + sevens) | v
		n += bits.OnesCount64(^t & highs)
	}
	for ; i < len(s); i++ {
		if s[i] == c {
			n++
		}
	}
	return n
}
