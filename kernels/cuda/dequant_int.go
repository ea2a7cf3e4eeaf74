package cuda

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/kernels/cuda/wire"
)

// IntLayout is the packing of an integer-coded weight (wire's numbering).
type IntLayout int

// The integer layouts dequant_int decodes.
const (
	CTBitstream IntLayout = wire.LayoutCTBitstream // compressed-tensors ≥ 0.18 pack-quantized
	CTPerWord   IntLayout = wire.LayoutCTPerWord   // compressed-tensors ≤ 0.17
	GPTQ        IntLayout = wire.LayoutGPTQ        // qweight [in·b/32, out]
	AWQ         IntLayout = wire.LayoutAWQ         // qweight [in, out/8], interleaved nibbles
)

// IntWeight is an integer-coded weight as stored, with its small tensors
// already read as formats/scheme reads them. Rows × Cols is the logical
// weight: for GPTQ and AWQ the outputs × the inputs.
type IntWeight struct {
	Layout     IntLayout
	Bits       int
	Rows, Cols int
	// Packed is weight_packed (compressed-tensors) or qweight, as stored.
	Packed []byte
	// Scales are [Rows, groups] (compressed-tensors) or [groups, Rows]
	// (GPTQ, AWQ).
	Scales []float32
	// Zeros are the zero points as values, in the scales' shape: the signed
	// weight_zero_point, GPTQ v1's stored z − 1 plus one, GPTQ v2's and AWQ's
	// z. nil: none (compressed-tensors 0, GPTQ 2^(b−1), AWQ 8).
	Zeros []float32
	// GIdx is each column's group (g_idx, weight_g_idx: desc_act orders);
	// nil: column / GroupSize, the last group taking any rest.
	GIdx      []int32
	GroupSize int // 0: ceil(Cols / groups)
}

// groups is the scales' group count, and whether the scales fit.
func (w *IntWeight) groups() (int, error) {
	if w.Rows <= 0 || w.Cols <= 0 || len(w.Scales) == 0 || len(w.Scales)%w.Rows != 0 {
		return 0, fmt.Errorf("rule int-scale-shape: %d scales for %d rows", len(w.Scales), w.Rows)
	}
	g := len(w.Scales) / w.Rows
	if g > w.Cols {
		return 0, fmt.Errorf("rule int-scale-shape: %d groups for %d columns", g, w.Cols)
	}
	return g, nil
}

// parts checks w and returns its wire parts: packed words, scales, zero
// values and each column's group.
func (w *IntWeight) parts() (groups int, parts [][]byte, err error) {
	if groups, err = w.groups(); err != nil {
		return 0, nil, err
	}
	words, err := wire.IntWords(int64(w.Layout), int64(w.Bits), int64(w.Rows), int64(w.Cols))
	if err != nil {
		return 0, nil, fmt.Errorf("rule int-layout: %v", err)
	}
	if int64(len(w.Packed)) != words {
		return 0, nil, fmt.Errorf("rule packed-size: %d packed bytes, [%d, %d] at %d bits needs %d", len(w.Packed), w.Rows, w.Cols, w.Bits, words)
	}
	z := w.Zeros
	if z == nil {
		mid := float32(0)
		switch w.Layout {
		case GPTQ:
			mid = float32(int(1) << (w.Bits - 1))
		case AWQ:
			mid = 8
		}
		z = make([]float32, len(w.Scales))
		for i := range z {
			z[i] = mid
		}
	}
	if len(z) != len(w.Scales) {
		return 0, nil, fmt.Errorf("rule int-zero-shape: %d zero points for %d scales", len(z), len(w.Scales))
	}
	gi := make([]byte, 4*w.Cols)
	size := w.GroupSize
	if size <= 0 {
		size = (w.Cols + groups - 1) / groups
	}
	for i := range w.Cols {
		g := int32(min(i/size, groups-1))
		if w.GIdx != nil {
			if len(w.GIdx) != w.Cols {
				return 0, nil, fmt.Errorf("rule g_idx: %d entries for %d columns", len(w.GIdx), w.Cols)
			}
			if g = w.GIdx[i]; g < 0 || int(g) >= groups {
				return 0, nil, fmt.Errorf("rule g_idx: entry %d is %d, outside 0..%d", i, g, groups-1)
			}
		}
		binary.LittleEndian.PutUint32(gi[4*i:], uint32(g))
	}
	return groups, [][]byte{w.Packed, f32Bytes(w.Scales), f32Bytes(z), gi}, nil
}

func (w *IntWeight) request(op string, groups int) wire.Request {
	return wire.Request{Op: op, Rows: int64(w.Rows), Cols: int64(w.Cols),
		IntFields: wire.IntFields{Layout: int64(w.Layout), Bits: int64(w.Bits), Groups: int64(groups), Source: wire.SourceInt}}
}

// DequantInt decodes an integer-coded weight on the GPU (on the CPU when
// there is none): bit for bit formats/scheme's values.
func (b *Backend) DequantInt(ctx context.Context, w *IntWeight) ([]float32, error) {
	groups, parts, err := w.parts()
	if err != nil {
		return nil, err
	}
	n := w.Rows * w.Cols
	need := int64(4*n) + int64(len(parts[0])+len(parts[1])+len(parts[2])+len(parts[3]))
	if 4*int64(w.Cols) > wire.MaxStep/2 || w.Rows >= 1<<31 {
		b.logf("cuda: dequant_int runs on the CPU: [%d, %d] exceeds the worker's staging or 2^31 rows", w.Rows, w.Cols)
		return DequantIntCPU(w)
	}
	r, out, err := b.call(ctx, need, w.request(wire.OpDequantInt, groups), parts...)
	if err == nil {
		return bytesF32(out, 0, n, r)
	}
	if _, ok := err.(*errFallback); !ok {
		return nil, err
	}
	return DequantIntCPU(w)
}

// DequantIntCPU is DequantInt on the CPU: the codes unpacked by
// formats/packing, then formats/scheme's formulas, (q − z)·s for
// compressed-tensors and s·(q − z) for GPTQ and AWQ.
func DequantIntCPU(w *IntWeight) ([]float32, error) {
	groups, parts, err := w.parts()
	if err != nil {
		return nil, err
	}
	rows, cols := w.Rows, w.Cols
	z := f32sOf(parts[2])
	gi := make([]int, cols)
	for i := range gi {
		gi[i] = int(int32(binary.LittleEndian.Uint32(parts[3][4*i:])))
	}
	out := make([]float32, rows*cols)
	switch w.Layout {
	case CTBitstream, CTPerWord:
		l := packing.CTBitstream
		if w.Layout == CTPerWord {
			l = packing.CTPerWord
		}
		codes := make([]int8, rows*cols)
		if err := packing.UnpackCT(codes, w.Packed, rows, cols, w.Bits, l); err != nil {
			return nil, err
		}
		for r := range rows {
			for c := range cols {
				k := r*groups + gi[c]
				out[r*cols+c] = (float32(codes[r*cols+c]) - z[k]) * w.Scales[k]
			}
		}
		return out, nil
	}
	codes := make([]uint8, rows*cols) // stored [in, out]
	if w.Layout == GPTQ {
		err = packing.UnpackGPTQWeight(codes, w.Packed, cols, rows, w.Bits)
	} else {
		err = packing.UnpackAWQ(codes, w.Packed, cols, rows)
	}
	if err != nil {
		return nil, err
	}
	for o := range rows {
		for i := range cols {
			k := gi[i]*rows + o
			out[o*cols+i] = w.Scales[k] * (float32(codes[i*rows+o]) - z[k])
		}
	}
	return out, nil
}

func f32sOf(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}
