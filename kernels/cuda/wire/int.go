package wire

import (
	"encoding/binary"
	"fmt"
)

// Integer layouts of dequant_int (and of stats with Source "int"), as the
// kernels number them (kernels/cuda/ptx/dequant_int.cu).
const (
	LayoutCTBitstream = 0 // compressed-tensors ≥ 0.18 pack-quantized: a bitstream a row
	LayoutCTPerWord   = 1 // compressed-tensors ≤ 0.17: 32/b whole values a word
	LayoutGPTQ        = 2 // qweight [in·b/32, out], a bitstream a column
	LayoutAWQ         = 3 // qweight [in, out/8], eight interleaved nibbles a word
)

// Sources of a stats request: the format whose dequant parts it carries.
const (
	SourceInt   = "int"
	SourceNVFP4 = "nvfp4"
	SourceMXFP4 = "mxfp4"
	SourceFP8   = "fp8"
)

// StatsPartial is the size of one thread block's partial in a stats
// answer: n, NaN, inf and codes at an end of their range (uint64), then
// mean, M2, min and max (float64). StatsBuckets is the bucket table's
// length (uint64 counts by the top 16 bits of a float32).
const (
	StatsPartial = 64
	StatsBuckets = 1 << 16
)

// IntFields are the request parameters of the integer layouts and of stats.
// For dequant_int Rows × Cols is the logical weight (GPTQ and AWQ: outputs ×
// inputs); the parts are the packed words, the float32 scales and zero
// values ([Rows, Groups] for compressed-tensors, [Groups, Rows] for GPTQ and
// AWQ) and each column's group (int32, Cols of them).
type IntFields struct {
	Layout int64  `json:"layout,omitempty"`
	Bits   int64  `json:"bits,omitempty"`
	Groups int64  `json:"groups,omitempty"`
	Source string `json:"source,omitempty"` // stats: SourceInt, SourceNVFP4, ...
}

// IntWords is the byte size of the packed words of an integer weight, or
// an error naming the rule its parameters break.
func IntWords(layout, bits, rows, cols int64) (int64, error) {
	switch layout {
	case LayoutCTBitstream, LayoutCTPerWord:
		if bits < 1 || bits > 8 {
			return 0, fmt.Errorf("compressed-tensors bits %d outside 1..8", bits)
		}
		p := (cols*bits + 31) / 32
		if layout == LayoutCTPerWord {
			per := 32 / bits
			p = (cols + per - 1) / per
		}
		return 4 * rows * p, nil
	case LayoutGPTQ:
		if bits != 2 && bits != 3 && bits != 4 && bits != 8 {
			return 0, fmt.Errorf("GPTQ bits %d is not 2, 3, 4 or 8", bits)
		}
		if cols*bits%32 != 0 {
			return 0, fmt.Errorf("%d GPTQ inputs at %d bits do not fill whole words", cols, bits)
		}
		return cols * bits / 32 * rows * 4, nil
	case LayoutAWQ:
		if bits != 4 || rows%8 != 0 {
			return 0, fmt.Errorf("AWQ wants 4 bits and outputs a multiple of 8, not %d bits and %d outputs", bits, rows)
		}
		return rows * cols / 2, nil
	}
	return 0, fmt.Errorf("unknown integer layout %d", layout)
}

func checkInt(req Request, parts [][]byte) error {
	want := func(sizes ...int64) error {
		if len(parts) != len(sizes) {
			return fmt.Errorf("%s: %d payload parts, want %d", req.Op, len(parts), len(sizes))
		}
		for i, s := range sizes {
			if int64(len(parts[i])) != s {
				return fmt.Errorf("%s: part %d holds %d bytes, want %d", req.Op, i, len(parts[i]), s)
			}
		}
		return nil
	}
	const lim = 1 << 40
	if req.Rows >= 1<<31 || req.Cols >= 1<<31 { // the kernels' 32-bit divisions
		return fmt.Errorf("%s: [%d, %d] has a dimension of 2^31 or more", req.Op, req.Rows, req.Cols)
	}
	src := req.Source
	if req.Op == OpDequantInt {
		src = SourceInt
	}
	switch src {
	case SourceInt:
		for _, x := range []int64{req.Rows, req.Cols, req.Groups} {
			if x <= 0 || x > lim {
				return fmt.Errorf("%s: dimension %d out of range", req.Op, x)
			}
		}
		if req.Rows*req.Cols > lim || req.Groups > req.Cols {
			return fmt.Errorf("%s: [%d, %d] with %d groups is out of range", req.Op, req.Rows, req.Cols, req.Groups)
		}
		words, err := IntWords(req.Layout, req.Bits, req.Rows, req.Cols)
		if err != nil {
			return fmt.Errorf("%s: %v", req.Op, err)
		}
		sc := 4 * req.Groups * req.Rows
		if err := want(words, sc, sc, 4*req.Cols); err != nil {
			return err
		}
		for i := range req.Cols { // the kernels index the scales by these
			if g := int32(binary.LittleEndian.Uint32(parts[3][4*i:])); g < 0 || int64(g) >= req.Groups {
				return fmt.Errorf("%s: column %d's group %d is outside 0..%d", req.Op, i, g, req.Groups-1)
			}
		}
		return nil
	case SourceNVFP4, SourceMXFP4:
		op := OpDequantNVFP4
		if src == SourceMXFP4 {
			op = OpDequantMXFP4
		}
		r := req
		r.Op = op
		return Check(r, parts)
	case SourceFP8:
		r := req
		r.Op = OpDequantFP8
		return Check(r, parts)
	}
	return fmt.Errorf("%s: unknown source %q", req.Op, src)
}
