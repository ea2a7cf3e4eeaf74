package numeric

import "encoding/binary"

// Integer and boolean tensors decoded to float32 (exact up to 2^24).

// DecodeI8 decodes signed bytes.
func DecodeI8(dst []float32, src []byte) {
	dst = dst[:len(src)]
	for i, b := range src {
		dst[i] = float32(int8(b))
	}
}

// DecodeU8 decodes unsigned bytes (also BOOL: any non-zero byte is 1).
func DecodeU8(dst []float32, src []byte) {
	dst = dst[:len(src)]
	for i, b := range src {
		dst[i] = float32(b)
	}
}

func decodeBool(dst []float32, src []byte) {
	dst = dst[:len(src)]
	for i, b := range src {
		if b != 0 {
			dst[i] = 1
		} else {
			dst[i] = 0
		}
	}
}

// DecodeI16 decodes little-endian int16s.
func DecodeI16(dst []float32, src []byte) {
	dst = dst[:len(src)/2]
	for i := range dst {
		dst[i] = float32(int16(binary.LittleEndian.Uint16(src[2*i:])))
	}
}

// DecodeU16 decodes little-endian uint16s.
func DecodeU16(dst []float32, src []byte) {
	dst = dst[:len(src)/2]
	for i := range dst {
		dst[i] = float32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

// DecodeI32 decodes little-endian int32s.
func DecodeI32(dst []float32, src []byte) {
	dst = dst[:len(src)/4]
	for i := range dst {
		dst[i] = float32(int32(binary.LittleEndian.Uint32(src[4*i:])))
	}
}

// DecodeU32 decodes little-endian uint32s.
func DecodeU32(dst []float32, src []byte) {
	dst = dst[:len(src)/4]
	for i := range dst {
		dst[i] = float32(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

// DecodeI64 decodes little-endian int64s.
func DecodeI64(dst []float32, src []byte) {
	dst = dst[:len(src)/8]
	for i := range dst {
		dst[i] = float32(int64(binary.LittleEndian.Uint64(src[8*i:])))
	}
}

// DecodeU64 decodes little-endian uint64s.
func DecodeU64(dst []float32, src []byte) {
	dst = dst[:len(src)/8]
	for i := range dst {
		dst[i] = float32(binary.LittleEndian.Uint64(src[8*i:]))
	}
}
