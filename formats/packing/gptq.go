package packing

import (
	"fmt"
	"math"
)

// GPTQ packs qweight [in·b/32, out] along the input dimension: column j is a
// little-endian bitstream of its in values, element 0 in the low bits (3-bit
// fields cross words). qzeros [groups, out·b/32] is packed the same way along
// the output columns. Codes are unsigned, 0 .. 2^b−1.

// GPTQWeightRows is the number of int32 rows of a qweight for in inputs.
func GPTQWeightRows(in, bits int) (int, error) {
	if bits != 2 && bits != 3 && bits != 4 && bits != 8 {
		return 0, &LayoutError{Layout: "gptq", Rule: "bits", Msg: fmt.Sprintf("GPTQ bits must be 2, 3, 4 or 8, not %d", bits)}
	}
	if in < 0 || in > math.MaxInt/8 {
		return 0, tooLarge("gptq", fmt.Sprintf("%d inputs", in))
	}
	if in*bits%32 != 0 {
		return 0, &LayoutError{Layout: "gptq", Rule: "packed-size", Msg: fmt.Sprintf("%d inputs at %d bits do not fill whole int32 words", in, bits)}
	}
	return in * bits / 32, nil
}

// PackGPTQWeight packs unsigned codes of the stored [in, out] matrix into qweight bytes.
func PackGPTQWeight(codes []uint8, in, out, bits int) ([]byte, error) {
	rows, err := GPTQWeightRows(in, bits)
	if err != nil {
		return nil, err
	}
	if len(codes) != in*out {
		return nil, fmt.Errorf("packing gptq: %d codes for [%d, %d]", len(codes), in, out)
	}
	words := make([]uint32, rows*out)
	col := make([]uint32, rows)
	for j := range out {
		clear(col)
		for i := range in {
			putField(col, uint64(i*bits), uint(bits), uint32(codes[i*out+j])&(1<<bits-1))
		}
		for r := range rows {
			words[r*out+j] = col[r]
		}
	}
	return wordsToBytes(words), nil
}

// UnpackGPTQWeight unpacks qweight bytes into the unsigned codes of the stored
// [in, out] matrix.
func UnpackGPTQWeight(dst []uint8, qweight []byte, in, out, bits int) error {
	rows, err := GPTQWeightRows(in, bits)
	if err != nil {
		return err
	}
	n, err := unpackSizes("gptq", fmt.Sprintf("qweight for [%d, %d] at %d bits", in, out, bits), len(dst), len(qweight), [2]int{in, out}, rows, out, 4)
	if err != nil || n == 0 {
		return err
	}
	col := make([]byte, 4*rows)
	for j := range out {
		for r := range rows {
			copy(col[4*r:4*r+4], qweight[4*(r*out+j):])
		}
		for i := range in {
			dst[i*out+j] = uint8(field(col, uint64(i*bits), uint(bits)))
		}
	}
	return nil
}

// PackRowBits packs unsigned codes of a [rows, cols] matrix along dim 1 as a
// bitstream per row, ceil(cols·b/32) words a row (GPTQ qzeros).
func PackRowBits(codes []uint8, rows, cols, bits int) ([]byte, error) {
	if err := checkBits("gptq-qzeros", bits); err != nil {
		return nil, err
	}
	if len(codes) != rows*cols {
		return nil, fmt.Errorf("packing gptq-qzeros: %d codes for [%d, %d]", len(codes), rows, cols)
	}
	p := (cols*bits + 31) / 32
	words := make([]uint32, rows*p)
	for r := range rows {
		for c := range cols {
			putField(words[r*p:(r+1)*p], uint64(c*bits), uint(bits), uint32(codes[r*cols+c])&(1<<bits-1))
		}
	}
	return wordsToBytes(words), nil
}

// UnpackRowBits reverses PackRowBits.
func UnpackRowBits(dst []uint8, packed []byte, rows, cols, bits int) error {
	if err := checkBits("gptq-qzeros", bits); err != nil {
		return err
	}
	p := CTWordsPerRow(cols, bits, CTBitstream) // the same bitstream a row
	n, err := unpackSizes("gptq-qzeros", fmt.Sprintf("[%d, %d] at %d bits", rows, cols, bits), len(dst), len(packed), [2]int{rows, cols}, rows, p, 4)
	if err != nil || n == 0 {
		return err
	}
	for r := range rows {
		row := packed[4*r*p : 4*(r+1)*p]
		for c := range cols {
			dst[r*cols+c] = uint8(field(row, uint64(c*bits), uint(bits)))
		}
	}
	return nil
}

// GPTQWordRows is the range of qweight rows that holds inputs [i0, i1).
func GPTQWordRows(i0, i1, bits int) (r0, r1 int) {
	return i0 * bits / 32, (i1*bits + 31) / 32
}

// UnpackGPTQColumns unpacks inputs [i0, i1) of outputs [o0, o1) from just
// the qweight rows that hold them (GPTQWordRows), so a few input columns cost
// a few rows instead of the whole tensor. dst is [(i1−i0), (o1−o0)].
func UnpackGPTQColumns(dst []uint8, rows []byte, out, bits, i0, i1, o0, o1 int) error {
	if bits != 2 && bits != 3 && bits != 4 && bits != 8 {
		return &LayoutError{Layout: "gptq", Rule: "bits", Msg: fmt.Sprintf("GPTQ bits must be 2, 3, 4 or 8, not %d", bits)}
	}
	if err := checkWindow("gptq", out, i0, i1, o0, o1); err != nil {
		return err
	}
	r0, r1 := GPTQWordRows(i0, i1, bits)
	n, err := unpackSizes("gptq", fmt.Sprintf("qweight rows %d:%d (inputs %d:%d) of %d outputs", r0, r1, i0, i1, out), len(dst), len(rows), [2]int{i1 - i0, o1 - o0}, r1-r0, out, 4)
	if err != nil || n == 0 {
		return err // or nothing to unpack: no column buffer sized by the inputs alone
	}
	col := make([]byte, 4*(r1-r0))
	w := o1 - o0
	for o := o0; o < o1; o++ {
		for r := range r1 - r0 {
			copy(col[4*r:4*r+4], rows[4*(r*out+o):])
		}
		for i := i0; i < i1; i++ {
			dst[(i-i0)*w+(o-o0)] = uint8(field(col, uint64(i*bits-32*r0), uint(bits)))
		}
	}
	return nil
}

// checkWindow refuses a window of inputs [i0, i1) and outputs [o0, o1)
// that is empty the wrong way round, negative, past the outputs, or so far
// along the inputs that its bit positions would overflow.
func checkWindow(layout string, out, i0, i1, o0, o1 int) error {
	if i0 < 0 || i1 < i0 || i1 > math.MaxInt/8 || o0 < 0 || o1 < o0 || o1 > out {
		return fmt.Errorf("packing %s: window inputs %d:%d outputs %d:%d of %d", layout, i0, i1, o0, o1, out)
	}
	return nil
}
