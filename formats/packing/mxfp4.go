package packing

import (
	"fmt"

	"github.com/quantscope/quantscope/formats/numeric"
)

// MXFP4 (OCP microscaling, gpt-oss naming): `*_blocks` U8 [..., n/32, 16]
// holds 32 E2M1 codes a block in 16 bytes (even element in the low nibble),
// `*_scales` U8 [..., n/32] one E8M0 exponent a block; w = ldexp(e2m1, s − 127).

// MXBlock is the number of values sharing one MX scale.
const MXBlock = 32

// DecodeMXFP4 dequantizes blocks and scales into dst, 32 values a scale.
func DecodeMXFP4(dst []float32, blocks, scales []byte) error {
	if uint64(len(blocks)) != uint64(len(scales))*16 {
		return sizeErr("mxfp4", uint64(len(blocks)), uint64(len(scales))*16, fmt.Sprintf("blocks for %d scales", len(scales)))
	}
	if len(dst) < 2*len(blocks) {
		return fmt.Errorf("packing mxfp4: destination holds %d values, need %d", len(dst), 2*len(blocks))
	}
	s := make([]float32, min(len(scales), 4096))
	for lo := 0; lo < len(scales); lo += len(s) {
		hi := min(lo+len(s), len(scales))
		numeric.DecodeE8M0(s, scales[lo:hi])
		numeric.DecodeE2M1Blocks(dst[2*16*lo:2*16*hi], blocks[16*lo:16*hi], s[:hi-lo], MXBlock)
	}
	return nil
}

// SwapNibbles exchanges the two codes of every byte, converting between the
// low-nibble-first layout (ModelOpt, compressed-tensors, gpt-oss, PyTorch) and
// the high-nibble-first one TorchAO wrote before October 2025.
func SwapNibbles(b []byte) {
	for i, x := range b {
		b[i] = x<<4 | x>>4
	}
}
