package packing

import (
	"encoding/binary"
	"fmt"
)

// GPT-QModel's planar layout (checkpoint_format gptq_p,
// gptqmodel/utils/planar_packing.py): a b-bit code is split into bit planes
// whose widths divide 32, so no code crosses a word. For each 32
// consecutive codes of a stream — a qweight column along the inputs, a
// qzeros row along the outputs — the planes' words follow one another, b
// words in all, the low plane first; within a plane of width w, word k holds
// codes [k·32/w, (k+1)·32/w) at shifts w·j. At 2, 4 and 8 bits there is one
// plane and the words are the continuous layout's. Streams are whole
// multiples of 32 codes.

// planarPlanes are each width's planes, (width, bit offset), low first.
var planarPlanes = [9][][2]uint{
	2: {{2, 0}},
	3: {{2, 0}, {1, 2}},
	4: {{4, 0}},
	5: {{4, 0}, {1, 4}},
	6: {{4, 0}, {2, 4}},
	7: {{4, 0}, {2, 4}, {1, 6}},
	8: {{8, 0}},
}

func checkPlanar(what string, bits, n int) error {
	if bits < 2 || bits > 8 {
		return &LayoutError{Layout: "gptq_p", Rule: "bits", Msg: fmt.Sprintf("planar bits must be 2..8, not %d", bits)}
	}
	if n%32 != 0 {
		return &LayoutError{Layout: "gptq_p", Rule: "packed-size", Msg: fmt.Sprintf("%s: %d codes are not whole chunks of 32, which the planar layout stores", what, n)}
	}
	return nil
}

// planarField is code j (0..31) of the chunk whose b little-endian words
// are chunk[:4b].
func planarField(chunk []byte, j, bits int) uint8 {
	var v uint32
	word := 0
	for _, p := range planarPlanes[bits] {
		w, off := p[0], p[1]
		per := 32 / int(w)
		x := binary.LittleEndian.Uint32(chunk[4*(word+j/per):])
		v |= (x >> (w * uint(j%per)) & (1<<w - 1)) << off
		word += int(w)
	}
	return uint8(v)
}

// putPlanar ORs code v in as code j of the chunk of words.
func putPlanar(chunk []uint32, j, bits int, v uint32) {
	word := 0
	for _, p := range planarPlanes[bits] {
		w, off := p[0], p[1]
		per := 32 / int(w)
		chunk[word+j/per] |= (v >> off & (1<<w - 1)) << (w * uint(j%per))
		word += int(w)
	}
}

// GPTQPlanarWordRows is the range of planar qweight rows that holds inputs
// [i0, i1): the whole 32-input chunks around them.
func GPTQPlanarWordRows(i0, i1, bits int) (r0, r1 int) {
	return i0 / 32 * bits, (i1 + 31) / 32 * bits
}

// PackGPTQPlanarWeight packs unsigned codes of the stored [in, out] matrix
// into planar qweight bytes [in·b/32, out].
func PackGPTQPlanarWeight(codes []uint8, in, out, bits int) ([]byte, error) {
	if err := checkPlanar("qweight inputs", bits, in); err != nil {
		return nil, err
	}
	if len(codes) != in*out {
		return nil, fmt.Errorf("packing gptq_p: %d codes for [%d, %d]", len(codes), in, out)
	}
	rows := in / 32 * bits
	words := make([]uint32, rows*out)
	chunk := make([]uint32, bits)
	for j := range out {
		for c := range in / 32 {
			clear(chunk)
			for k := range 32 {
				putPlanar(chunk, k, bits, uint32(codes[(32*c+k)*out+j]))
			}
			for r, x := range chunk {
				words[(c*bits+r)*out+j] = x
			}
		}
	}
	return wordsToBytes(words), nil
}

// UnpackGPTQPlanarColumns unpacks inputs [i0, i1) of outputs [o0, o1) from
// the planar qweight rows GPTQPlanarWordRows(i0, i1) names (rows, every
// output's word of each). dst is [(i1−i0), (o1−o0)].
func UnpackGPTQPlanarColumns(dst []uint8, rows []byte, out, bits, i0, i1, o0, o1 int) error {
	if bits < 2 || bits > 8 {
		return &LayoutError{Layout: "gptq_p", Rule: "bits", Msg: fmt.Sprintf("planar bits must be 2..8, not %d", bits)}
	}
	if err := checkWindow("gptq_p", out, i0, i1, o0, o1); err != nil {
		return err
	}
	r0, r1 := GPTQPlanarWordRows(i0, i1, bits)
	n, err := unpackSizes("gptq_p", fmt.Sprintf("qweight rows %d:%d (inputs %d:%d) of %d outputs", r0, r1, i0, i1, out), len(dst), len(rows), [2]int{i1 - i0, o1 - o0}, r1-r0, out, 4)
	if err != nil || n == 0 {
		return err
	}
	col := make([]byte, 4*(r1-r0))
	w, c0 := o1-o0, i0/32
	for o := o0; o < o1; o++ {
		for r := range r1 - r0 {
			copy(col[4*r:4*r+4], rows[4*(r*out+o):])
		}
		for i := i0; i < i1; i++ {
			dst[(i-i0)*w+(o-o0)] = planarField(col[4*(i/32-c0)*bits:], i%32, bits)
		}
	}
	return nil
}

// PackPlanarRowBits packs unsigned codes of a [rows, cols] matrix along dim
// 1 in the planar layout, cols·b/32 words a row (gptq_p qzeros).
func PackPlanarRowBits(codes []uint8, rows, cols, bits int) ([]byte, error) {
	if err := checkPlanar("qzeros columns", bits, cols); err != nil {
		return nil, err
	}
	if len(codes) != rows*cols {
		return nil, fmt.Errorf("packing gptq_p qzeros: %d codes for [%d, %d]", len(codes), rows, cols)
	}
	p := cols / 32 * bits
	words := make([]uint32, rows*p)
	for r := range rows {
		for c := range cols {
			putPlanar(words[r*p+c/32*bits:], c%32, bits, uint32(codes[r*cols+c]))
		}
	}
	return wordsToBytes(words), nil
}

// UnpackPlanarRowBits reverses PackPlanarRowBits.
func UnpackPlanarRowBits(dst []uint8, packed []byte, rows, cols, bits int) error {
	if err := checkPlanar("qzeros columns", bits, cols); err != nil {
		return err
	}
	p := cols / 32 * bits
	n, err := unpackSizes("gptq_p-qzeros", fmt.Sprintf("[%d, %d] at %d bits", rows, cols, bits), len(dst), len(packed), [2]int{rows, cols}, rows, p, 4)
	if err != nil || n == 0 {
		return err
	}
	for r := range rows {
		row := packed[4*r*p : 4*(r+1)*p]
		for c := range cols {
			dst[r*cols+c] = planarField(row[4*(c/32)*bits:], c%32, bits)
		}
	}
	return nil
}
