package scheme

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
)

// TensorReader gives the bytes of tensors by name.
type TensorReader interface {
	// ReadTensor returns n bytes at offset off within the tensor's data.
	ReadTensor(name string, off, n int64) ([]byte, error)
}

// DequantError is a module whose tensors cannot be dequantized as stored.
type DequantError struct {
	Module, Tensor, Rule, Msg string
}

func (e *DequantError) Error() string {
	s := fmt.Sprintf("module %q", e.Module)
	if e.Tensor != "" {
		s += fmt.Sprintf(": tensor %q", e.Tensor)
	}
	return s + ": rule " + e.Rule + ": " + e.Msg
}

// Matrix2D is the module's logical weight viewed as rows × cols: the last
// dimension is cols, every other dimension folds into rows (MoE experts stack).
func (m *Module) Matrix2D() (rows, cols uint64) {
	if len(m.WeightShape) == 0 {
		return 1, 1
	}
	rows = 1
	for _, d := range m.WeightShape[:len(m.WeightShape)-1] {
		rows *= d
	}
	return rows, m.WeightShape[len(m.WeightShape)-1]
}

// maxDequantElems bounds one Dequantize call (4 GiB of float32).
const maxDequantElems = 1 << 30

// Dequantize returns rows [lo, hi) of the module's logical weight as float32,
// row-major, cols values a row. It reads only the bytes those rows need,
// except for layouts packed along the input dimension (GPTQ, AWQ), where every
// row shares each stored word and the whole tensors are read.
func Dequantize(m *Module, r TensorReader, lo, hi int) ([]float32, error) {
	_, cols := m.Matrix2D()
	return DequantizeWindow(m, r, lo, hi, 0, int(cols))
}

// DequantizeWindow returns rows [lo, hi) and columns [c0, c1) of the logical
// weight, (hi−lo) × (c1−c0) values. For GPTQ and AWQ, which pack along the
// input dimension, it reads only the stored words of those columns; for the
// others it reads the rows and keeps the window.
func DequantizeWindow(m *Module, r TensorReader, lo, hi, c0, c1 int) ([]float32, error) {
	rows, cols := m.Matrix2D()
	if c0 < 0 || c1 < c0 || uint64(c1) > cols {
		return nil, &DequantError{Module: m.Name, Rule: "columns", Msg: fmt.Sprintf("columns %d:%d outside 0:%d", c0, c1, cols)}
	}
	if m.Format == FormatNone {
		return nil, &DequantError{Module: m.Name, Rule: "no-weight", Msg: "module has no weight to decode"}
	}
	if err := m.scaleKindErr(); err != nil {
		return nil, err
	}
	if lo < 0 || hi < lo || uint64(hi) > rows {
		return nil, &DequantError{Module: m.Name, Rule: "rows", Msg: fmt.Sprintf("rows %d:%d outside 0:%d", lo, hi, rows)}
	}
	if err := checkLimit(m, hi-lo, cols); err != nil {
		return nil, err
	}
	if rows == 0 || cols == 0 {
		return []float32{}, nil // an empty weight: no values, and nothing stored to read
	}
	d := &dq{m: m, r: r, lo: lo, hi: hi, rows: int(rows), cols: int(cols), c0: c0, c1: c1}
	switch m.Layout {
	case LayoutGPTQ, LayoutGPTQv2, LayoutGPTQp:
		return d.gptq()
	case LayoutAWQ:
		return d.awq()
	}
	v, err := d.rowsOf()
	if err != nil || (c0 == 0 && uint64(c1) == cols) {
		return v, err
	}
	w := c1 - c0
	out := make([]float32, (hi-lo)*w)
	for k := range hi - lo {
		copy(out[k*w:(k+1)*w], v[k*int(cols)+c0:k*int(cols)+c1])
	}
	return out, nil
}

// checkLimit refuses a call for more than maxDequantElems values, or on
// rows wider than that: a header can claim any width for a weight with no
// rows (its bytes are none), and the decoders size buffers by the width.
func checkLimit(m *Module, n int, cols uint64) error {
	if cols > maxDequantElems {
		return &DequantError{Module: m.Name, Tensor: m.Primary(), Rule: "columns", Msg: fmt.Sprintf("rows of %d values exceed the %d-value limit of one call", cols, maxDequantElems)}
	}
	if hi, v := bits.Mul64(uint64(n), cols); hi != 0 || v > maxDequantElems {
		return &DequantError{Module: m.Name, Tensor: m.Primary(), Rule: "rows", Msg: fmt.Sprintf("%d rows of %d values exceed the %d-value limit of one call; ask for fewer rows", n, cols, maxDequantElems)}
	}
	return nil
}

// scaleKindErr refuses a module whose lone file's quantscope.scale does
// not describe its FP8 scale tensor: decoded, it would divide by a
// multiplier or multiply by a divisor.
func (m *Module) scaleKindErr() error {
	if m.rare().scaleRefused == "" {
		return nil
	}
	t := m.infos.get(m.rare().scaleRole)
	name := ""
	if t != nil {
		name = t.Name
	}
	return &DequantError{Module: m.Name, Tensor: name, Rule: "scale-kind", Msg: m.rare().scaleRefused}
}

// rowsOf decodes whole rows [d.lo, d.hi) of the formats stored row by row.
func (d *dq) rowsOf() ([]float32, error) {
	m := d.m
	switch {
	case m.Layout == LayoutUnquantized:
		return d.dense()
	case m.Layout == LayoutModelOptExpertsT:
		return d.nvfp4ExpertsT()
	case m.Format == FormatNVFP4:
		return d.nvfp4()
	case m.Format == FormatMXFP4:
		return d.mxfp4()
	case m.Format == FormatMXFP8 || m.Format == FormatFP8 || m.Layout == LayoutIntChannel:
		return d.scaled()
	case m.Layout == LayoutCTPack:
		return d.ctPack()
	case m.Layout == LayoutModelOptAWQ:
		return d.modeloptAWQ()
	}
	return nil, &DequantError{Module: m.Name, Rule: "format", Msg: fmt.Sprintf("no decoder for format %s layout %s", m.Format, m.Layout)}
}

type dq struct {
	m          *Module
	r          TensorReader
	lo, hi     int // the rows asked for
	c0, c1     int // the columns asked for (GPTQ and AWQ read only these)
	rows, cols int
}

func (d *dq) fail(t *TensorInfo, rule, msg string) error {
	name := ""
	if t != nil {
		name = t.Name
	}
	return &DequantError{Module: d.m.Name, Tensor: name, Rule: rule, Msg: msg}
}

func (d *dq) need(role string) (*TensorInfo, error) {
	t, ok := d.m.infos.lookup(role)
	if !ok {
		return nil, &DequantError{Module: d.m.Name, Rule: "scale-missing", Msg: fmt.Sprintf("no %s tensor", role)}
	}
	return t, nil
}

// rowBytes reads rows [lo, hi) of a tensor whose rows each take rowLen bytes.
func (d *dq) rowBytes(t *TensorInfo, rowLen, lo, hi int) ([]byte, error) {
	if need, ok := rowsSize(rowLen, hi); !ok || need > t.NBytes {
		return nil, d.fail(t, "tensor-size", fmt.Sprintf("needs %d bytes for %d rows, holds %d", need, hi, t.NBytes))
	}
	return d.r.ReadTensor(t.Name, int64(lo)*int64(rowLen), int64(hi-lo)*int64(rowLen))
}

// rowsSize is the bytes of n rows of rowLen bytes, and false when that
// passes 2^63 (it is then the largest uint64).
func rowsSize(rowLen, n int) (uint64, bool) {
	hi, lo := bits.Mul64(uint64(rowLen), uint64(n))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxUint64, false
	}
	return lo, true
}

func (d *dq) all(t *TensorInfo) ([]byte, error) { return d.r.ReadTensor(t.Name, 0, int64(t.NBytes)) }

func (d *dq) floats(t *TensorInfo, b []byte) ([]float32, error) {
	v, err := numeric.Decode(t.DType, b)
	if err != nil {
		return nil, d.fail(t, "dtype", err.Error())
	}
	return v, nil
}

// scalar reads a one-element tensor (weight_scale_2, weight_global_scale).
func (d *dq) scalar(t *TensorInfo) (float32, error) {
	if t.elements() != 1 {
		return 0, d.fail(t, "scale-shape", fmt.Sprintf("want one value, shape is %v", t.Shape))
	}
	b, err := d.all(t)
	if err != nil {
		return 0, err
	}
	v, err := d.floats(t, b)
	if err != nil {
		return 0, err
	}
	if len(v) != 1 {
		return 0, d.fail(t, "scale-dtype", fmt.Sprintf("%d bytes of %s hold %d values, not one", len(b), t.DType, len(v)))
	}
	return v[0], nil
}

// scaleBytes is the bytes an element of a scale or zero-point tensor takes.
// A sub-byte dtype (F4, F6) packs several a byte, which no layout here
// reads: it is refused, naming the tensor.
func (d *dq) scaleBytes(t *TensorInfo) (int, error) {
	if !wholeBytes(t.DType) {
		return 0, d.fail(t, "scale-dtype", fmt.Sprintf("%s is %d bits an element: scales and zero points take whole bytes", t.DType, t.DType.Bits()))
	}
	return int(t.DType.Bits() / 8), nil
}

func (d *dq) dense() ([]float32, error) {
	w, err := d.weightInfo()
	if err != nil {
		return nil, err
	}
	if w.DType.Bits()%8 != 0 {
		return nil, d.fail(w, "dtype", fmt.Sprintf("no row decoder for %s", w.DType))
	}
	eb := int(w.DType.Bits() / 8)
	b, err := d.rowBytes(w, d.cols*eb, d.lo, d.hi)
	if err != nil {
		return nil, err
	}
	return d.floats(w, b)
}

func (d *dq) weightInfo() (*TensorInfo, error) {
	for _, role := range []string{"weight", "weight_packed", "tensor"} {
		if t, ok := d.m.infos.lookup(role); ok {
			return t, nil
		}
	}
	return nil, d.fail(nil, "no-weight", "module has no weight tensor")
}

// grid is a scale tensor laid over the weight: the scale of element (r, c) is
// vals[(r/rowDiv − base)·cols + c/colDiv].
type grid struct {
	vals           []float32
	cols           int
	rowDiv, colDiv int
	base           int
}

func (g *grid) at(r, c int) float32 { return g.vals[(r/g.rowDiv-g.base)*g.cols+c/g.colDiv] }

// scaleGrid reads the part of a scale tensor that covers weight rows [lo, hi).
// Its shape decides the layout: one value (tensor), one a row (channel),
// [rows, G] (groups of ceil(cols/G)), or [R, C] with R < rows (blocks).
// block, when set, is the declared block size (a partial last block makes
// the shape alone ambiguous).
func (d *dq) scaleGrid(t *TensorInfo, groupCols int, block []int) (*grid, error) {
	eb, err := d.scaleBytes(t)
	if err != nil {
		return nil, err
	}
	n := t.elements()
	if n == 0 {
		return nil, d.fail(t, "scale-shape", "empty scale tensor")
	}
	if n == 1 {
		v, err := d.scalar(t)
		if err != nil {
			return nil, err
		}
		return &grid{vals: []float32{v}, cols: 1, rowDiv: d.rows + 1, colDiv: d.cols + 1}, nil
	}
	sRows, sCols := uint64(1), n
	if len(t.Shape) >= 2 {
		sCols = t.Shape[len(t.Shape)-1]
		sRows = n / sCols
	} else if n == uint64(d.rows) {
		sRows, sCols = n, 1
	}
	if sRows == 0 || sCols == 0 || sRows > uint64(d.rows) || sCols > uint64(d.cols) {
		return nil, d.fail(t, "scale-shape", fmt.Sprintf("scale shape %v does not fit weight [%d, %d]", t.Shape, d.rows, d.cols))
	}
	g := &grid{cols: int(sCols)}
	g.rowDiv = int(ceilDiv(uint64(d.rows), sRows))
	g.colDiv = int(ceilDiv(uint64(d.cols), sCols))
	if len(block) == 2 && block[0] > 0 && block[1] > 0 {
		g.rowDiv, g.colDiv = block[0], block[1]
		if ceilDiv(uint64(d.cols), uint64(g.colDiv)) != sCols {
			return nil, d.fail(t, "scale-shape", fmt.Sprintf("scale shape %v does not tile weight [%d, %d] in %d×%d blocks", t.Shape, d.rows, d.cols, block[0], block[1]))
		}
	}
	if groupCols > 0 && g.colDiv != groupCols {
		return nil, d.fail(t, "scale-shape", fmt.Sprintf("scale shape %v gives groups of %d values, the format uses %d", t.Shape, g.colDiv, groupCols))
	}
	if ceilDiv(uint64(d.rows), uint64(g.rowDiv)) != sRows {
		return nil, d.fail(t, "scale-shape", fmt.Sprintf("scale shape %v does not tile weight [%d, %d] in %d×%d blocks", t.Shape, d.rows, d.cols, g.rowDiv, g.colDiv))
	}
	if d.hi == d.lo {
		return g, nil
	}
	g.base = d.lo / g.rowDiv
	top := (d.hi-1)/g.rowDiv + 1
	b, err := d.rowBytes(t, int(sCols)*eb, g.base, top)
	if err != nil {
		return nil, err
	}
	if g.vals, err = d.scaleFloats(t, b); err != nil {
		return nil, err
	}
	return g, nil
}

// scaleFloats decodes scale bytes. The MX formats store their E8M0 block
// scales in U8 carriers as often as in F8_E8M0: either way each byte is the
// exponent of a power of two, not an integer.
func (d *dq) scaleFloats(t *TensorInfo, b []byte) ([]float32, error) {
	if t.DType == safetensors.U8 && (d.m.Format == FormatMXFP4 || d.m.Format == FormatMXFP8) {
		v := make([]float32, len(b))
		numeric.DecodeE8M0(v, b)
		return v, nil
	}
	return d.floats(t, b)
}

func (d *dq) nvfp4() ([]float32, error) {
	w, err := d.weightInfo()
	if err != nil {
		return nil, err
	}
	if d.cols%16 != 0 {
		return nil, d.fail(w, "nvfp4-shape", fmt.Sprintf("%d columns are not a multiple of the 16-value block", d.cols))
	}
	sc, err := d.need("weight_scale")
	if err != nil {
		return nil, err
	}
	global, err := d.nvfp4Global()
	if err != nil {
		return nil, err
	}
	g, err := d.scaleGrid(sc, 16, nil)
	if err != nil {
		return nil, err
	}
	packed, err := d.rowBytes(w, d.cols/2, d.lo, d.hi)
	if err != nil {
		return nil, err
	}
	out := make([]float32, (d.hi-d.lo)*d.cols)
	blocks := d.cols / 16
	if g.rowDiv != 1 || g.cols != blocks {
		return nil, d.fail(sc, "scale-shape", fmt.Sprintf("NVFP4 wants one scale per row and 16 values, shape is %v", sc.Shape))
	}
	for i := range g.vals {
		g.vals[i] *= global
	}
	for r := range d.hi - d.lo {
		numeric.DecodeE2M1Blocks(out[r*d.cols:(r+1)*d.cols], packed[r*d.cols/2:(r+1)*d.cols/2], g.vals[r*blocks:(r+1)*blocks], 16)
	}
	return out, nil
}

// nvfp4Global is an NVFP4 module's global scale as a multiplier:
// weight_scale_2, or one over compressed-tensors' weight_global_scale; 1
// without either (the rules report it).
func (d *dq) nvfp4Global() (float32, error) {
	if t, ok := d.m.infos.lookup("weight_scale_2"); ok {
		return d.scalar(t)
	}
	if t, ok := d.m.infos.lookup("weight_global_scale"); ok {
		gs, err := d.scalar(t)
		if err != nil {
			return 0, err
		}
		if gs == 0 {
			return 0, d.fail(t, "scale-value", "weight_global_scale is 0")
		}
		return 1 / gs, nil
	}
	return 1, nil
}

func (d *dq) mxfp4() ([]float32, error) {
	var w, sc *TensorInfo
	var err error
	if d.m.Layout == LayoutGPTOSS {
		if w, err = d.need("blocks"); err != nil {
			return nil, err
		}
		if sc, err = d.need("mx_scales"); err != nil {
			return nil, err
		}
	} else {
		if w, err = d.weightInfo(); err != nil {
			return nil, err
		}
		if sc, err = d.need("weight_scale"); err != nil {
			return nil, err
		}
	}
	if d.cols%32 != 0 {
		return nil, d.fail(w, "mxfp4-shape", fmt.Sprintf("%d columns are not a multiple of the 32-value block", d.cols))
	}
	groups := d.cols / 32
	if sc.DType.Bits() != 8 { // one E8M0 exponent a byte
		return nil, d.fail(sc, "scale-dtype", fmt.Sprintf("MXFP4 scales are 8-bit exponents, this one is %s", sc.DType))
	}
	if sc.elements() != uint64(d.rows*groups) {
		return nil, d.fail(sc, "scale-shape", fmt.Sprintf("want %d scales (%d rows × %d blocks), shape is %v", d.rows*groups, d.rows, groups, sc.Shape))
	}
	blocks, err := d.rowBytes(w, d.cols/2, d.lo, d.hi)
	if err != nil {
		return nil, err
	}
	scales, err := d.rowBytes(sc, groups, d.lo, d.hi)
	if err != nil {
		return nil, err
	}
	out := make([]float32, (d.hi-d.lo)*d.cols)
	if err := packing.DecodeMXFP4(out, blocks, scales); err != nil {
		return nil, d.fail(w, "mxfp4", err.Error())
	}
	return out, nil
}

// scaled covers FP8 (tensor, channel, group, block), MXFP8 and int8 weights:
// decode the codes, then multiply (or divide) by the scale grid.
func (d *dq) scaled() ([]float32, error) {
	w, err := d.weightInfo()
	if err != nil {
		return nil, err
	}
	sc, ok := d.m.infos.lookup("weight_scale")
	if !ok {
		sc, ok = d.m.infos.lookup("weight_scale_inv")
	}
	if !ok {
		return nil, d.fail(w, "scale-missing", "quantized weight has neither weight_scale nor weight_scale_inv")
	}
	groupCols := 0
	if d.m.Format == FormatMXFP8 {
		groupCols = 32
	}
	g, err := d.scaleGrid(sc, groupCols, d.m.Block)
	if err != nil {
		return nil, err
	}
	b, err := d.rowBytes(w, d.cols, d.lo, d.hi)
	if err != nil {
		return nil, err
	}
	q, err := d.floats(w, b)
	if err != nil {
		return nil, err
	}
	var zp *grid
	if z, ok := d.m.infos.lookup("weight_zero_point"); ok && d.m.Layout == LayoutIntChannel {
		if zp, err = d.scaleGrid(z, 0, nil); err != nil {
			return nil, err
		}
	}
	for r := d.lo; r < d.hi; r++ {
		row := q[(r-d.lo)*d.cols : (r-d.lo+1)*d.cols]
		for c := range row {
			s := g.at(r, c)
			v := row[c]
			if zp != nil {
				v -= zp.at(r, c)
			}
			if d.m.InverseScale {
				row[c] = v / s
			} else {
				row[c] = v * s
			}
		}
	}
	return q, nil
}
