package scheme

import (
	"fmt"
	"math"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
)

// ModelOpt's INT4 AWQ export (W4A16_AWQ, W4A8_AWQ) and AWQ's pre_quant_scale.

// modeloptAWQ decodes ModelOpt's INT4 AWQ export: w = code · weight_scale
// of the row's group, in float32 (the per-block amax / 7 the export
// divides by). W4A8's weight_scale_2 belongs to the FP8 stage the runtime
// adds after this and is not applied. These are the stored values: AWQ
// stored the weight divided by pre_quant_scale, column by column, and the
// layer multiplies its input by it (PreQuantScale). The bytes hold pairs
// of rows: the pairs covering [lo, hi) are read.
func (d *dq) modeloptAWQ() ([]float32, error) {
	codes, err := d.modeloptCodes()
	if err != nil {
		return nil, err
	}
	sc, err := d.need("weight_scale")
	if err != nil {
		return nil, err
	}
	g, err := d.scaleGrid(sc, d.m.GroupSize, nil)
	if err != nil {
		return nil, err
	}
	if g.rowDiv != 1 {
		return nil, d.fail(sc, "scale-shape", fmt.Sprintf("scale shape %v does not give each of the %d rows its own group scales", sc.Shape, d.rows))
	}
	out := make([]float32, len(codes))
	for i, q := range codes {
		out[i] = float32(q) * g.at(d.lo+i/d.cols, i%d.cols)
	}
	return out, nil
}

// modeloptCodes reads the signed 4-bit codes of rows [d.lo, d.hi), from
// the pairs of rows that hold them.
func (d *dq) modeloptCodes() ([]int8, error) {
	w, err := d.weightInfo()
	if err != nil {
		return nil, err
	}
	if d.rows%2 != 0 {
		return nil, d.fail(w, "shape", fmt.Sprintf("%d rows are not an even number: the codes are packed in pairs of rows", d.rows))
	}
	p0, p1 := d.lo/2, (d.hi+1)/2
	b, err := d.rowBytes(w, d.cols, p0, p1)
	if err != nil {
		return nil, err
	}
	codes := make([]int8, 2*(p1-p0)*d.cols)
	if err := packing.UnpackModelOptInt4(codes, b, 2*(p1-p0), d.cols); err != nil {
		return nil, d.fail(w, "packed-size", err.Error())
	}
	return codes[(d.lo-2*p0)*d.cols : (d.hi-2*p0)*d.cols], nil
}

// PreQuantScale is a module's pre_quant_scale (ModelOpt AWQ, NVFP4_AWQ):
// one factor an input column that the layer multiplies its input by, the
// stored weight having been divided by it. ok is false when the module has
// none (ModelOpt folds it into the preceding norm where it can).
func PreQuantScale(m *Module, r TensorReader) (s []float32, ok bool, err error) {
	t, has := m.infos.lookup("pre_quant_scale")
	if !has {
		return nil, false, nil
	}
	d := &dq{m: m, r: r}
	_, cols := m.Matrix2D()
	if t.elements() != cols {
		return nil, true, d.fail(t, "scale-shape", fmt.Sprintf("pre_quant_scale %v does not hold one factor for each of the %d input columns", t.Shape, cols))
	}
	b, err := d.all(t)
	if err != nil {
		return nil, true, err
	}
	if s, err = d.floats(t, b); err != nil {
		return nil, true, err
	}
	for i, v := range s {
		if !(v > 0 && v <= math.MaxFloat32) {
			return nil, true, d.fail(t, "scale-value", fmt.Sprintf("pre_quant_scale[%d] is %g: want a positive finite factor", i, v))
		}
	}
	return s, true, nil
}

// FoldPreQuantScale multiplies rows of w, a module's decoded weight (whole
// rows of its logical [rows, cols]), by the module's pre_quant_scale
// column by column when it has one: the weight the layer applies to its
// raw input, x·diag(s)·Wᵀ = x·(W·diag(s))ᵀ. Without one w is left as is.
func FoldPreQuantScale(m *Module, r TensorReader, w []float32) error {
	s, ok, err := PreQuantScale(m, r)
	if err != nil || !ok {
		return err
	}
	cols := len(s)
	if cols == 0 || len(w)%cols != 0 {
		return &DequantError{Module: m.Name, Rule: "shape", Msg: fmt.Sprintf("%d values are not whole rows of %d", len(w), cols)}
	}
	for i := range w {
		w[i] *= s[i%cols]
	}
	return nil
}

// nvfp4ExpertsT decodes rows [d.lo, d.hi) of stacked experts stored as
// ModelOpt exports Llama 4's and gpt-oss's (LayoutModelOptExpertsT): the
// logical [E, in, out] as [E·in, out], row r being input r % in of expert
// r / in across the outputs. Its codes are in byte row r/2 (the low nibble
// for an even input: the export packed along the input, then transposed
// back), its block scale in scale row r/16; the value is e2m1 ·
// f32(f32(scale) · scale_2), as for every ModelOpt NVFP4 weight.
func (d *dq) nvfp4ExpertsT() ([]float32, error) {
	w, err := d.weightInfo()
	if err != nil {
		return nil, err
	}
	sc, err := d.need("weight_scale")
	if err != nil {
		return nil, err
	}
	if len(d.m.WeightShape) != 3 || d.m.WeightShape[1]%16 != 0 {
		return nil, d.fail(w, "nvfp4-shape", fmt.Sprintf("stacked experts %v: want [E, in, out] with in a multiple of the 16-value block", d.m.WeightShape))
	}
	if sc.DType != safetensors.F8_E4M3 || sc.elements() != uint64(d.rows/16*d.cols) {
		return nil, d.fail(sc, "scale-shape", fmt.Sprintf("want F8_E4M3 [E, in/16, out] = %d scales, found %s %v", d.rows/16*d.cols, sc.DType, sc.Shape))
	}
	global, err := d.nvfp4Global()
	if err != nil {
		return nil, err
	}
	out := d.cols
	b0, b1 := d.lo/2, (d.hi+1)/2
	wb, err := d.rowBytes(w, out, b0, b1)
	if err != nil {
		return nil, err
	}
	s0, s1 := d.lo/16, (d.hi+15)/16
	sb, err := d.rowBytes(sc, out, s0, s1)
	if err != nil {
		return nil, err
	}
	scale := make([]float32, len(sb))
	for i, c := range sb {
		scale[i] = numeric.E4M3ToFloat32(c) * global
	}
	res := make([]float32, (d.hi-d.lo)*out)
	for r := d.lo; r < d.hi; r++ {
		codes, srow, shift := wb[(r/2-b0)*out:], scale[(r/16-s0)*out:], 4*(r%2)
		dst := res[(r-d.lo)*out : (r-d.lo+1)*out]
		for o := range dst {
			dst[o] = numeric.E2M1ToFloat32(codes[o]>>shift&15) * srow[o]
		}
	}
	return res, nil
}
