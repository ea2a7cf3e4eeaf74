package packing

import (
	"encoding/binary"
	"fmt"
)

// AWQ (gemm) packs eight 4-bit codes a word along the output columns with an
// interleave: nibble k of word c holds column 8c + awqOrder[k]. qweight is
// [in, out/8] and qzeros [in/g, out/8].
var awqOrder = [8]int{0, 2, 4, 6, 1, 3, 5, 7}

// PackAWQ packs the unsigned 4-bit codes of a [rows, cols] matrix.
func PackAWQ(codes []uint8, rows, cols int) ([]byte, error) {
	if cols%8 != 0 {
		return nil, &LayoutError{Layout: "awq", Rule: "packed-size", Msg: fmt.Sprintf("%d columns are not a multiple of 8", cols)}
	}
	if n, ok := mulInt(rows, cols); !ok || len(codes) != n {
		return nil, fmt.Errorf("packing awq: %d codes for [%d, %d]", len(codes), rows, cols)
	}
	out := make([]byte, rows*cols/2)
	for r := range rows {
		for c := range cols / 8 {
			var w uint32
			for k, col := range awqOrder {
				w |= uint32(codes[r*cols+8*c+col]&0xF) << (4 * k)
			}
			binary.LittleEndian.PutUint32(out[4*(r*cols/8+c):], w)
		}
	}
	return out, nil
}

// UnpackAWQ unpacks AWQ words into the unsigned codes of a [rows, cols] matrix.
func UnpackAWQ(dst []uint8, packed []byte, rows, cols int) error {
	if cols%8 != 0 {
		return &LayoutError{Layout: "awq", Rule: "packed-size", Msg: fmt.Sprintf("%d columns are not a multiple of 8", cols)}
	}
	n, err := unpackSizes("awq", fmt.Sprintf("[%d, %d] at 4 bits", rows, cols), len(dst), len(packed), [2]int{rows, cols}, rows, cols/2)
	if err != nil || n == 0 {
		return err
	}
	for r := range rows {
		for c := range cols / 8 {
			w := binary.LittleEndian.Uint32(packed[4*(r*cols/8+c):])
			base := dst[r*cols+8*c : r*cols+8*c+8]
			for k, col := range awqOrder {
				base[col] = uint8(w>>(4*k)) & 0xF
			}
		}
	}
	return nil
}
