package packing

import (
	"fmt"
	"strconv"
	"strings"
)

// CTLayout is one of compressed-tensors' two pack_to_int32 layouts. Both
// pack row by row, each row starting at a fresh int32 word.
type CTLayout uint8

const (
	// CTBitstream (compressed-tensors ≥ 0.18): element i of a row at bit i·b,
	// fields crossing words; a row takes ceil(cols·b/32) words.
	CTBitstream CTLayout = iota
	// CTPerWord (compressed-tensors ≤ 0.17): 32/b whole values per word,
	// element i in word i/(32/b) at bit (i mod (32/b))·b, the top bits unused.
	CTPerWord
)

func (l CTLayout) String() string {
	if l == CTPerWord {
		return "ct-per-word"
	}
	return "ct-bitstream"
}

// CTLayoutForVersion picks the layout from quantization_config.version. An
// empty or unreadable version means the current writer (bitstream). For 1, 2,
// 4 and 8 bits the two layouts are the same bytes, so the choice only matters
// for 3, 5, 6 and 7.
func CTLayoutForVersion(version string) CTLayout {
	v := strings.TrimPrefix(strings.TrimSpace(version), "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return CTBitstream
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return CTBitstream
	}
	if major == 0 && minor <= 17 {
		return CTPerWord
	}
	return CTBitstream
}

// CTWordsPerRow is the packed width P of a row of cols b-bit values (0 for
// bits outside 1..8 or a negative cols). It is exact for any cols: no
// intermediate product can overflow.
func CTWordsPerRow(cols, bits int, l CTLayout) int {
	if bits < 1 || bits > 8 || cols < 0 {
		return 0
	}
	if l == CTPerWord {
		per := 32 / bits
		return ceilDiv(cols, per)
	}
	// cols = 32q + r: q·b whole words, then r·b < 256 bits.
	return cols/32*bits + (cols%32*bits+31)/32
}

// ceilDiv is ⌈a/b⌉ for a ≥ 0, b > 0, without forming a + b − 1.
func ceilDiv(a, b int) int {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

func ctBitPos(i, bits int, l CTLayout) uint64 {
	if l == CTPerWord {
		per := 32 / bits
		return uint64(i/per)*32 + uint64(i%per*bits)
	}
	return uint64(i) * uint64(bits)
}

// PackCT packs signed codes q (in −2^(b−1) .. 2^(b−1)−1) of a [rows, cols]
// matrix along dim 1, storing q + 2^(b−1) (CT-002). It returns the I32 bytes of
// the [rows, P] weight_packed tensor.
func PackCT(codes []int8, rows, cols, bits int, l CTLayout) ([]byte, error) {
	if err := checkBits(l.String(), bits); err != nil {
		return nil, err
	}
	if n, ok := mulInt(rows, cols); !ok || len(codes) != n {
		return nil, fmt.Errorf("packing %s: %d codes for a [%d, %d] matrix", l, len(codes), rows, cols)
	}
	p := CTWordsPerRow(cols, bits, l)
	words := make([]uint32, rows*p)
	off := int32(1) << (bits - 1)
	for r := range rows {
		row := words[r*p : (r+1)*p]
		for i := range cols {
			q := int32(codes[r*cols+i])
			if q < -off || q >= off {
				return nil, &LayoutError{Layout: l.String(), Rule: "CT-002", Msg: fmt.Sprintf("code %d at [%d, %d] does not fit %d signed bits", q, r, i, bits)}
			}
			putField(row, ctBitPos(i, bits, l), uint(bits), uint32(q+off))
		}
	}
	return wordsToBytes(words), nil
}

// UnpackCT reverses PackCT: the I32 bytes of a [rows, P] weight_packed into the
// signed codes of the logical [rows, cols] matrix (CT-003).
func UnpackCT(dst []int8, packed []byte, rows, cols, bits int, l CTLayout) error {
	if err := checkBits(l.String(), bits); err != nil {
		return err
	}
	p := CTWordsPerRow(cols, bits, l)
	n, err := unpackSizes(l.String(), fmt.Sprintf("[%d, %d] at %d bits", rows, cols, bits), len(dst), len(packed), [2]int{rows, cols}, rows, p, 4)
	if err != nil || n == 0 {
		return err
	}
	off := int32(1) << (bits - 1)
	for r := range rows {
		row := packed[r*p*4 : (r+1)*p*4]
		out := dst[r*cols : (r+1)*cols]
		if bits == 4 || bits == 8 { // word-aligned fields: no crossing, one shift each
			per := 32 / bits
			mask := uint32(1)<<bits - 1
			for i := range out {
				w := uint32(row[4*(i/per)]) | uint32(row[4*(i/per)+1])<<8 | uint32(row[4*(i/per)+2])<<16 | uint32(row[4*(i/per)+3])<<24
				out[i] = int8(int32(w>>(uint(i%per*bits))&mask) - off)
			}
			continue
		}
		for i := range out {
			out[i] = int8(int32(field(row, ctBitPos(i, bits, l), uint(bits))) - off)
		}
	}
	return nil
}

// PackCTDim0 packs a [rows, cols] matrix of signed codes along dim 0, as
// compressed-tensors packs weight_zero_point: the result is [P(rows), cols].
func PackCTDim0(codes []int8, rows, cols, bits int, l CTLayout) ([]byte, error) {
	if n, ok := mulInt(rows, cols); !ok || len(codes) != n {
		return nil, fmt.Errorf("packing %s: %d codes for a [%d, %d] matrix", l, len(codes), rows, cols)
	}
	t := make([]int8, len(codes))
	for r := range rows {
		for c := range cols {
			t[c*rows+r] = codes[r*cols+c]
		}
	}
	packedT, err := PackCT(t, cols, rows, bits, l) // [cols, P]
	if err != nil {
		return nil, err
	}
	p := CTWordsPerRow(rows, bits, l)
	out := make([]byte, len(packedT))
	for c := range cols {
		for w := range p {
			copy(out[4*(w*cols+c):4*(w*cols+c)+4], packedT[4*(c*p+w):4*(c*p+w)+4])
		}
	}
	return out, nil
}

// UnpackCTDim0 reverses PackCTDim0: [P(rows), cols] I32 bytes into the signed
// [rows, cols] codes.
func UnpackCTDim0(dst []int8, packed []byte, rows, cols, bits int, l CTLayout) error {
	if err := checkBits(l.String(), bits); err != nil {
		return err
	}
	p := CTWordsPerRow(rows, bits, l)
	n, err := unpackSizes(l.String(), fmt.Sprintf("zero points [%d, %d] packed on dim 0", rows, cols), len(dst), len(packed), [2]int{rows, cols}, p, cols, 4)
	if err != nil || n == 0 {
		return err
	}
	col := make([]byte, 4*p)
	off := int32(1) << (bits - 1)
	for c := range cols {
		for w := range p {
			copy(col[4*w:4*w+4], packed[4*(w*cols+c):])
		}
		for r := range rows {
			dst[r*cols+c] = int8(int32(field(col, ctBitPos(r, bits, l), uint(bits))) - off)
		}
	}
	return nil
}
