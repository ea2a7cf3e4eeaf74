// Package packing converts between the bit layouts quantized checkpoints use
// to store integer and FP4 codes and plain arrays of codes: compressed-tensors
// pack_to_int32 (both layouts), GPTQ qweight/qzeros, AWQ's interleaved
// columns, and MXFP4 blocks.
//
// Unpackers take the tensor's raw little-endian bytes and its logical
// dimensions, check that the byte count matches the layout before touching
// anything, and return a *LayoutError otherwise; they never panic on short or
// hostile input. What the codes mean (zero points, scales) is scheme's job.
package packing

import (
	"encoding/binary"
	"fmt"
	"math"
	mbits "math/bits"
)

// LayoutError reports packed data whose size or parameters do not fit the layout.
type LayoutError struct {
	Layout string // "ct-bitstream", "gptq", ...
	Rule   string // e.g. "CT-001" or "packed-size"
	Msg    string
}

func (e *LayoutError) Error() string {
	return fmt.Sprintf("packing %s: rule %s: %s", e.Layout, e.Rule, e.Msg)
}

func sizeErr(layout string, got, want uint64, what string) error {
	return &LayoutError{Layout: layout, Rule: "packed-size", Msg: fmt.Sprintf("%s: have %d bytes, the layout needs %d", what, got, want)}
}

// field reads the b-bit field starting at bit position bit of a little-endian
// stream of 32-bit words held in w (fields may cross a word boundary).
func field(w []byte, bit uint64, b uint) uint32 {
	word := bit / 32
	off := bit % 32
	v := uint64(binary.LittleEndian.Uint32(w[4*word:]))
	if off+uint64(b) > 32 {
		v |= uint64(binary.LittleEndian.Uint32(w[4*word+4:])) << 32
	}
	return uint32(v>>off) & (1<<b - 1)
}

// putField ORs the b-bit value into the word stream at bit position bit.
func putField(w []uint32, bit uint64, b uint, v uint32) {
	word := bit / 32
	off := bit % 32
	w[word] |= v << off
	if off+uint64(b) > 32 {
		w[word+1] |= v >> (32 - off)
	}
}

// wordsToBytes serialises int32 words little-endian, as safetensors stores I32.
func wordsToBytes(w []uint32) []byte {
	out := make([]byte, 4*len(w))
	for i, x := range w {
		binary.LittleEndian.PutUint32(out[4*i:], x)
	}
	return out
}

func checkBits(layout string, bits int) error {
	if bits < 1 || bits > 8 {
		return &LayoutError{Layout: layout, Rule: "CT-001", Msg: fmt.Sprintf("num_bits %d is outside 1..8", bits)}
	}
	return nil
}

// mulInt is the product of non-negative ints, and whether it is one: false
// for a negative factor or a product past math.MaxInt (dimensions from a
// hostile header wrap otherwise into a size that matches a short buffer).
func mulInt(xs ...int) (int, bool) {
	p := uint64(1)
	for _, x := range xs {
		if x < 0 {
			return 0, false
		}
		hi, lo := mbits.Mul64(p, uint64(x))
		if hi != 0 || lo > math.MaxInt {
			return 0, false
		}
		p = lo
	}
	return int(p), true
}

// tooLarge is the error for dimensions whose sizes no int holds.
func tooLarge(layout, what string) error {
	return &LayoutError{Layout: layout, Rule: "packed-size", Msg: what + " is negative or too large to address"}
}

// unpackSizes is every unpacker's first check: codes[0] × codes[1] codes
// go to dst (of dstLen), from packed bytes that must number exactly the
// product of bytes; each size must be addressable. what names the shape in
// the errors. It returns the number of codes (0: nothing to unpack, and no
// loop over the other dimension's 2^62 rows).
func unpackSizes(layout, what string, dstLen, packedLen int, codes [2]int, bytes ...int) (int, error) {
	n, ok1 := mulInt(codes[0], codes[1])
	want, ok2 := mulInt(bytes...)
	if !ok1 || !ok2 {
		return 0, tooLarge(layout, what)
	}
	if packedLen != want {
		return 0, sizeErr(layout, uint64(packedLen), uint64(want), what)
	}
	if dstLen < n {
		return 0, fmt.Errorf("packing %s: destination holds %d codes, need %d", layout, dstLen, n)
	}
	return n, nil
}
