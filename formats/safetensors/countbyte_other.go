//go:build !wasm

package safetensors

import "strings"

func countByte(s string, c byte) int { return strings.Count(s, everyByte[c:int(c)+1]) }

// everyByte holds each byte value at its own index: one-byte strings
// without an allocation.
var everyByte = func() string {
	var b [256]byte
	for i := range b {
		b[i] = byte(i)
	}
	return string(b[:])
}()
