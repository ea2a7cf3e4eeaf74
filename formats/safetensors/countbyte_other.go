//go:build !wasm

package safetensors

import "strings"

// (a one-byte string from a byte is not allocated)
func countByte(s string, c byte) int { return strings.Count(s, string([]byte{c})) }
