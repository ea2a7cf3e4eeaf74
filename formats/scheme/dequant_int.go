package scheme

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
)

// GPTQ and AWQ pack along the input dimension, so every logical row (an
// output channel) shares each stored word with its neighbours: a window of
// input columns is what can be read narrowly, not a band of rows.

// groupIndex maps input column i to its scale group: g_idx when stored,
// else i/size.
func (d *dq) groupIndex(role string, in, groups, size int) ([]int32, error) {
	if t, ok := d.m.infos.lookup(role); ok {
		if t.elements() != uint64(in) {
			return nil, d.fail(t, "g_idx", fmt.Sprintf("has %d entries for %d input columns", t.elements(), in))
		}
		return d.gIdx(t, groups)
	}
	idx := make([]int32, in)
	if size <= 0 {
		size = (in + groups - 1) / groups
	}
	for i := range idx {
		idx[i] = int32(min(i/max(size, 1), groups-1))
	}
	return idx, nil
}

// gIdx reads a stored g_idx: every entry must be a whole number in
// 0..groups−1. Integer dtypes are compared as integers, floats in float64
// before any conversion (an int conversion of +Inf, NaN or 1e20 is
// MinInt64 on amd64, which a "≥ groups" test lets through).
func (d *dq) gIdx(t *TensorInfo, groups int) ([]int32, error) {
	b, err := d.all(t)
	if err != nil {
		return nil, err
	}
	limit := int64(min(groups, math.MaxInt32)) // an entry must fit the int32 it is kept in
	bad := func(i int, x any) error {
		return d.fail(t, "g_idx", fmt.Sprintf("entry %d is %v, outside 0..%d", i, x, limit-1))
	}
	if ints, ok := intValues(t.DType, b); ok {
		idx := make([]int32, len(ints))
		for i, x := range ints {
			if x < 0 || x >= limit {
				if t.DType == safetensors.U64 { // saturated: show the stored value
					return nil, bad(i, binary.LittleEndian.Uint64(b[8*i:]))
				}
				return nil, bad(i, x)
			}
			idx[i] = int32(x)
		}
		return idx, nil
	}
	v, err := d.floats(t, b)
	if err != nil {
		return nil, err
	}
	idx := make([]int32, len(v))
	for i, x := range v {
		f := float64(x)
		if !(f >= 0 && f < float64(limit)) || f != math.Trunc(f) {
			return nil, bad(i, x)
		}
		idx[i] = int32(f)
	}
	return idx, nil
}

// intValues decodes little-endian integers exactly (U64 values past
// MaxInt64 saturate to it); ok is false for dtypes that are not integers.
func intValues(dt safetensors.DType, b []byte) (v []int64, ok bool) {
	switch dt {
	case safetensors.I8, safetensors.U8, safetensors.I16, safetensors.U16, safetensors.I32, safetensors.U32, safetensors.I64, safetensors.U64:
	default:
		return nil, false
	}
	n := int(dt.Bits() / 8)
	v = make([]int64, len(b)/n)
	for i := range v {
		e := b[i*n : (i+1)*n]
		switch dt {
		case safetensors.I8:
			v[i] = int64(int8(e[0]))
		case safetensors.U8:
			v[i] = int64(e[0])
		case safetensors.I16:
			v[i] = int64(int16(binary.LittleEndian.Uint16(e)))
		case safetensors.U16:
			v[i] = int64(binary.LittleEndian.Uint16(e))
		case safetensors.I32:
			v[i] = int64(int32(binary.LittleEndian.Uint32(e)))
		case safetensors.U32:
			v[i] = int64(binary.LittleEndian.Uint32(e))
		case safetensors.I64:
			v[i] = int64(binary.LittleEndian.Uint64(e))
		case safetensors.U64:
			v[i] = int64(min(binary.LittleEndian.Uint64(e), math.MaxInt64))
		}
	}
	return v, true
}

// intMatrix reads GPTQ/AWQ's scales and the unsigned zero-point codes, both [groups, out].
func (d *dq) scalesAndZeros(unpackZeros func(dst []uint8, b []byte, groups int) error) (scales []float32, zeros []uint8, groups int, err error) {
	sc, err := d.need("scales")
	if err != nil {
		return nil, nil, 0, err
	}
	out := d.rows
	if len(sc.Shape) != 2 || sc.Shape[1] != uint64(out) || sc.Shape[0] == 0 {
		return nil, nil, 0, d.fail(sc, "scale-shape", fmt.Sprintf("want [groups, %d], shape is %v", out, sc.Shape))
	}
	groups = int(sc.Shape[0])
	sb, err := d.all(sc)
	if err != nil {
		return nil, nil, 0, err
	}
	if scales, err = d.floats(sc, sb); err != nil {
		return nil, nil, 0, err
	}
	if z, ok := d.m.infos.lookup("qzeros"); ok {
		zb, err := d.all(z)
		if err != nil {
			return nil, nil, 0, err
		}
		zeros = make([]uint8, groups*out)
		if err := unpackZeros(zeros, zb, groups); err != nil {
			return nil, nil, 0, d.fail(z, "qzeros", err.Error())
		}
	}
	return scales, zeros, groups, nil
}

// gptqCodes unpacks inputs [c0, c1) of outputs [lo, hi) of a GPTQ qweight
// (continuous, or gptq_p's planar chunks of 32 inputs) into codes, reading
// only the qweight rows that hold them. codes is [(c1−c0), (hi−lo)].
func (d *dq) gptqCodes(qw *TensorInfo, codes []uint8) error {
	in, out, bits := d.cols, d.rows, d.m.Bits
	wordRows, unpack := packing.GPTQWordRows, packing.UnpackGPTQColumns
	if d.m.Layout == LayoutGPTQp {
		if in%32 != 0 {
			return d.fail(qw, "qweight", fmt.Sprintf("%d inputs are not whole chunks of 32, which the planar layout stores", in))
		}
		wordRows, unpack = packing.GPTQPlanarWordRows, packing.UnpackGPTQPlanarColumns
	} else if _, err := packing.GPTQWeightRows(in, bits); err != nil {
		return d.fail(qw, "qweight", err.Error())
	}
	r0, r1 := wordRows(d.c0, d.c1, bits)
	qb, err := d.rowBytes(qw, 4*out, r0, r1)
	if err != nil {
		return err
	}
	if err := unpack(codes, qb, out, bits, d.c0, d.c1, d.lo, d.hi); err != nil {
		return d.fail(qw, "qweight", err.Error())
	}
	return nil
}

func (d *dq) gptq() ([]float32, error) {
	qw, err := d.need("qweight")
	if err != nil {
		return nil, err
	}
	in, out, bits := d.cols, d.rows, d.m.Bits
	w := d.c1 - d.c0
	codes := make([]uint8, w*(d.hi-d.lo))
	if err := d.gptqCodes(qw, codes); err != nil {
		return nil, err
	}
	scales, zeros, groups, err := d.scalesAndZeros(func(dst []uint8, b []byte, groups int) error {
		if d.m.Layout == LayoutGPTQp {
			return packing.UnpackPlanarRowBits(dst, b, groups, out, bits)
		}
		return packing.UnpackRowBits(dst, b, groups, out, bits)
	})
	if err != nil {
		return nil, err
	}
	gi, err := d.groupIndex("g_idx", in, groups, d.m.GroupSize)
	if err != nil {
		return nil, err
	}
	zeroAdd := float32(0)
	if d.m.Layout == LayoutGPTQ {
		zeroAdd = 1 // v1 stores z − 1
	}
	mid := float32(int(1) << (bits - 1))
	n := d.hi - d.lo
	res := make([]float32, n*w)
	for o := d.lo; o < d.hi; o++ {
		row := res[(o-d.lo)*w : (o-d.lo+1)*w]
		for i := d.c0; i < d.c1; i++ {
			g := int(gi[i])
			z := mid
			if zeros != nil {
				z = float32(zeros[g*out+o]) + zeroAdd
			}
			row[i-d.c0] = scales[g*out+o] * (float32(codes[(i-d.c0)*n+(o-d.lo)]) - z)
		}
	}
	return res, nil
}

func (d *dq) awq() ([]float32, error) {
	qw, err := d.need("qweight")
	if err != nil {
		return nil, err
	}
	in, out := d.cols, d.rows
	if out%8 != 0 {
		return nil, d.fail(qw, "qweight", fmt.Sprintf("%d outputs are not a multiple of 8", out))
	}
	qb, err := d.rowBytes(qw, out/2, d.c0, d.c1) // qweight rows are inputs
	if err != nil {
		return nil, err
	}
	w := d.c1 - d.c0
	codes := make([]uint8, w*out)
	if err := packing.UnpackAWQ(codes, qb, w, out); err != nil {
		return nil, d.fail(qw, "qweight", err.Error())
	}
	scales, zeros, groups, err := d.scalesAndZeros(func(dst []uint8, b []byte, groups int) error {
		return packing.UnpackAWQ(dst, b, groups, out)
	})
	if err != nil {
		return nil, err
	}
	if in%groups != 0 {
		return nil, d.fail(d.m.infos.get("scales"), "scale-shape", fmt.Sprintf("%d groups do not divide %d inputs", groups, in))
	}
	size := in / groups
	res := make([]float32, (d.hi-d.lo)*w)
	for o := d.lo; o < d.hi; o++ {
		row := res[(o-d.lo)*w : (o-d.lo+1)*w]
		for i := d.c0; i < d.c1; i++ {
			g := i / size
			z := float32(8)
			if zeros != nil {
				z = float32(zeros[g*out+o])
			}
			row[i-d.c0] = scales[g*out+o] * (float32(codes[(i-d.c0)*out+o]) - z)
		}
	}
	return res, nil
}
