package numeric

import (
	"encoding/binary"
	"math"
	"sync"

	"github.com/x448/float16"
)

// F16ToFloat32 decodes an IEEE half from its bits.
func F16ToFloat32(h uint16) float32 { return float16.Frombits(h).Float32() }

// Float32ToF16 rounds to the nearest half, ties to even.
func Float32ToF16(x float32) uint16 { return float16.Fromfloat32(x).Bits() }

// BF16ToFloat32 decodes a bfloat16 from its bits.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToBF16 rounds to the nearest bfloat16, ties to even; NaN stays NaN.
func Float32ToBF16(x float32) uint16 {
	b := math.Float32bits(x)
	if x != x {
		return uint16(b>>16) | 0x40
	}
	b += 0x7FFF + (b>>16)&1
	return uint16(b >> 16)
}

var (
	f16Once  sync.Once
	f16Table []float32 // 65,536 entries (256 KiB), built on first bulk use
)

// DecodeF16 decodes little-endian halves: dst[i] from src[2i:2i+2].
func DecodeF16(dst []float32, src []byte) {
	f16Once.Do(func() {
		f16Table = make([]float32, 1<<16)
		for h := range 1 << 16 {
			f16Table[h] = F16ToFloat32(uint16(h))
		}
	})
	n := len(src) / 2
	dst = dst[:n]
	t := f16Table[: 1<<16 : 1<<16]
	for i := range dst {
		dst[i] = t[binary.LittleEndian.Uint16(src[2*i:])]
	}
}

// DecodeBF16 decodes little-endian bfloat16s, four from each 8-byte load.
func DecodeBF16(dst []float32, src []byte) {
	n := len(src) / 2
	dst = dst[:n]
	quads := n &^ 3
	for i := 0; i < quads; i += 4 {
		w := binary.LittleEndian.Uint64(src[2*i : 2*i+8])
		d := (*[4]float32)(dst[i : i+4])
		d[0] = math.Float32frombits(uint32(w) << 16)
		d[1] = math.Float32frombits(uint32(w>>16) << 16)
		d[2] = math.Float32frombits(uint32(w>>32) << 16)
		d[3] = math.Float32frombits(uint32(w>>48) << 16)
	}
	for i := quads; i < n; i++ {
		dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
	}
}

// DecodeF32 decodes little-endian float32s.
func DecodeF32(dst []float32, src []byte) {
	n := len(src) / 4
	dst = dst[:n]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

// DecodeF64 decodes little-endian float64s, rounding to float32.
func DecodeF64(dst []float32, src []byte) {
	n := len(src) / 8
	dst = dst[:n]
	for i := range dst {
		dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])))
	}
}
