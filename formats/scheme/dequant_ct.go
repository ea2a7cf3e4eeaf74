package scheme

import (
	"fmt"

	"github.com/quantscope/quantscope/formats/packing"
)

// compressed-tensors pack-quantized: integer codes in int32 words, row by
// row (both layouts), with group scales, zero points and g_idx.

// ctWeight finds a compressed-tensors pack-quantized weight and its scale,
// and checks that each packed row holds the module's columns (CT-004): it
// returns the int32 words a row.
func (d *dq) ctWeight() (w, sc *TensorInfo, p int, err error) {
	if w, err = d.weightInfo(); err != nil {
		return nil, nil, 0, err
	}
	if sc, err = d.need("weight_scale"); err != nil {
		return nil, nil, 0, err
	}
	bits, l := d.m.Bits, d.m.packLayout
	p = packing.CTWordsPerRow(d.cols, bits, l)
	if p == 0 || len(w.Shape) == 0 || w.Shape[len(w.Shape)-1] != uint64(p) {
		return nil, nil, 0, d.fail(w, "CT-004", fmt.Sprintf("packed width %v does not hold %d values of %d bits (%s wants %d words a row)", w.Shape, d.cols, bits, l, p))
	}
	return w, sc, p, nil
}

// ctScales reads a compressed-tensors module's scales, [rows, groups] (or
// [rows, 1] per channel), for rows lo to hi, and says how many groups a row
// has.
func (d *dq) ctScales(sc *TensorInfo, lo, hi int) ([]float32, int, error) {
	sRows, groups := uint64(d.rows), uint64(1)
	if len(sc.Shape) >= 2 {
		groups = sc.Shape[len(sc.Shape)-1]
		sRows = sc.elements() / max(groups, 1)
	}
	if sRows != uint64(d.rows) || groups == 0 || groups > uint64(d.cols) {
		return nil, 0, d.fail(sc, "scale-shape", fmt.Sprintf("want [%d, groups], shape is %v", d.rows, sc.Shape))
	}
	eb, err := d.scaleBytes(sc)
	if err != nil {
		return nil, 0, err
	}
	sb, err := d.rowBytes(sc, int(groups)*eb, lo, hi)
	if err != nil {
		return nil, 0, err
	}
	scales, err := d.floats(sc, sb)
	return scales, int(groups), err
}

// ctZeroPoints reads weight_zero_point, the [rows, groups] codes packed on
// dim 0, or nil when the module has none. A 3-D (MoE) weight packs them per
// 2-D slice: each expert's [out, groups] along its own out.
func (d *dq) ctZeroPoints(bits int, l packing.CTLayout, groups int) ([]int8, error) {
	z, ok := d.m.infos.lookup("weight_zero_point")
	if !ok {
		return nil, nil
	}
	zb, err := d.all(z)
	if err != nil {
		return nil, err
	}
	stack, out := 1, d.rows
	if len(d.m.WeightShape) == 3 {
		stack, out = int(d.m.WeightShape[0]), int(d.m.WeightShape[1])
	}
	per := 4 * packing.CTWordsPerRow(out, bits, l) * groups
	if uint64(len(zb)) != uint64(stack)*uint64(per) {
		return nil, d.fail(z, "CT-003", fmt.Sprintf("zero points hold %d bytes, %d slices of [%d, %d] packed on dim 0 need %d", len(zb), stack, out, groups, uint64(stack)*uint64(per)))
	}
	zeros := make([]int8, d.rows*groups)
	for e := range stack {
		if err := packing.UnpackCTDim0(zeros[e*out*groups:(e+1)*out*groups], zb[e*per:(e+1)*per], out, groups, bits, l); err != nil {
			return nil, d.fail(z, "CT-003", err.Error())
		}
	}
	return zeros, nil
}

func (d *dq) ctPack() ([]float32, error) {
	w, sc, p, err := d.ctWeight()
	if err != nil {
		return nil, err
	}
	bits, l := d.m.Bits, d.m.packLayout
	b, err := d.rowBytes(w, 4*p, d.lo, d.hi)
	if err != nil {
		return nil, err
	}
	codes := make([]int8, (d.hi-d.lo)*d.cols)
	if err := packing.UnpackCT(codes, b, d.hi-d.lo, d.cols, bits, l); err != nil {
		return nil, d.fail(w, "CT-003", err.Error())
	}
	scales, groups, err := d.ctScales(sc, d.lo, d.hi)
	if err != nil {
		return nil, err
	}
	zeros, err := d.ctZeroPoints(bits, l, groups)
	if err != nil {
		return nil, err
	}
	gi, err := d.groupIndex("weight_g_idx", d.cols, groups, d.m.GroupSize)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(codes))
	for r := d.lo; r < d.hi; r++ {
		k := r - d.lo
		for c := range d.cols {
			g := int(gi[c])
			q := float32(codes[k*d.cols+c])
			if zeros != nil {
				q -= float32(zeros[r*int(groups)+g])
			}
			out[k*d.cols+c] = q * scales[k*int(groups)+g]
		}
	}
	return out, nil
}
