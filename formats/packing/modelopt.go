package packing

import "fmt"

// UnpackModelOptInt4 reads ModelOpt's INT4 AWQ weight as its export writes
// it (modelopt/torch/export/quant_utils.py, pack_int4_in_uint8): U8
// [rows/2, cols], pairs of output rows in one byte, row 2k's signed 4-bit
// code in the low nibble of byte (k, c) and row 2k+1's in the high nibble.
// It writes the rows × cols codes (−8…7) row-major into dst; rows must be
// even.
func UnpackModelOptInt4(dst []int8, packed []byte, rows, cols int) error {
	if rows%2 != 0 {
		return &LayoutError{Layout: "modelopt-awq", Rule: "packed-size", Msg: fmt.Sprintf("%d rows are not an even number: the codes are packed in pairs of rows", rows)}
	}
	n, err := unpackSizes("modelopt-awq", fmt.Sprintf("[%d, %d] at 4 bits", rows, cols), len(dst), len(packed), [2]int{rows, cols}, rows/2, cols)
	if err != nil || n == 0 {
		return err
	}
	for k := range rows / 2 {
		src := packed[k*cols : (k+1)*cols]
		even := dst[2*k*cols : (2*k+1)*cols]
		odd := dst[(2*k+1)*cols : (2*k+2)*cols]
		for c, b := range src {
			even[c] = int8(b<<4) >> 4 // sign-extend the low nibble
			odd[c] = int8(b) >> 4
		}
	}
	return nil
}

// PackModelOptInt4 is UnpackModelOptInt4's inverse, as ModelOpt's export
// packs (for the project's own writers): rows × cols codes in −8…7, rows
// even, into U8 [rows/2, cols].
func PackModelOptInt4(codes []int8, rows, cols int) ([]byte, error) {
	if rows%2 != 0 {
		return nil, &LayoutError{Layout: "modelopt-awq", Rule: "packed-size", Msg: fmt.Sprintf("%d rows are not an even number: the codes are packed in pairs of rows", rows)}
	}
	n, ok := mulInt(rows, cols)
	if !ok || len(codes) != n {
		return nil, fmt.Errorf("packing modelopt-awq: %d codes for [%d, %d]", len(codes), rows, cols)
	}
	out := make([]byte, n/2)
	for k := range rows / 2 {
		for c := range cols {
			lo, hi := codes[2*k*cols+c], codes[(2*k+1)*cols+c]
			if lo < -8 || lo > 7 || hi < -8 || hi > 7 {
				return nil, fmt.Errorf("packing modelopt-awq: code %d or %d outside −8…7", lo, hi)
			}
			out[k*cols+c] = byte(lo)&0x0F | (byte(hi)&0x0F)<<4
		}
	}
	return out, nil
}
