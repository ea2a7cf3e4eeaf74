package scheme

import (
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/safetensors"
)

// TensorReaderInto is a TensorReader that can also read into a caller's
// buffer, so that a streamed decode reuses its buffers instead of allocating
// one a band. checkpoint.Checkpoint implements it.
type TensorReaderInto interface {
	// ReadTensorInto fills dst with the tensor's bytes at offset off.
	ReadTensorInto(name string, dst []byte, off int64) error
}

// TensorStreamReader is a TensorReaderInto told where the stream a read
// belongs to ends (end bytes into the tensor): a remote checkpoint then
// reads ahead of the stream, and no further than end.
type TensorStreamReader interface {
	ReadTensorWithin(name string, dst []byte, off, end int64) error
}

// RowStream is a module's logical weight opened for decoding in bands of
// rows into buffers the caller owns: the unit of the companion's streamed
// full-module dequantization. Its values are those of Dequantize, bit for
// bit. NVFP4, FP8 (tensor, channel, block, group, MXFP8) and unquantized
// weights are decoded by fused table loops that read only the band's bytes
// (plus the scale rows covering it) into per-decoder buffers. GPTQ and AWQ
// pack along the input dimension, so every band touches every stored word:
// their tensors are read once, when the stream is opened, and kept (the
// packed size, bits/32 of the float32 output). The other layouts decode each
// band with Dequantize.
type RowStream struct {
	m          *Module
	r          TensorReader
	rows, cols int
	kind       streamKind
	w, sc      *TensorInfo
	global     float32         // NVFP4: the global scale, as a multiplier
	tab        [256]float32    // FP8: the code table
	atMax      [256]uint8      // codes (or E2M1 nibbles) of a byte at the format's largest magnitude
	scaleDec   numeric.Decoder // the scales' decoder (the weight's for dense)
	scaleTab   [256]float32    // NVFP4: an 8-bit scale code's value × the global scale
	g          *grid           // FP8: the scale grid's shape (and a tensor scale's value)
	tensorSc   bool            // FP8: one scale for the whole tensor
	limit      int             // rows past which no band is read (LimitRows); 0: all
}

type streamKind uint8

const (
	streamGeneric streamKind = iota
	streamDense
	streamNVFP4
	streamFP8
)

// OpenRows checks that m can be decoded and prepares its stream.
func OpenRows(m *Module, r TensorReader) (*RowStream, error) {
	rows, cols := m.Matrix2D()
	if rows > math.MaxInt32 { // no weight has 2^31 rows; int() of 2^63 is negative (too wide a row is the "columns" rule's)
		name := ""
		for _, role := range []string{"weight", "weight_packed", "qweight", "blocks"} {
			if t := m.infos.get(role); t != nil {
				name = t.Name
				break
			}
		}
		return nil, &DequantError{Module: m.Name, Tensor: name, Rule: "shape", Msg: fmt.Sprintf("a %d × %d weight: no real weight has 2^31 rows", rows, cols)}
	}
	if err := m.scaleKindErr(); err != nil {
		return nil, err
	}
	s := &RowStream{m: m, r: r, rows: int(rows), cols: int(cols)}
	d := &dq{m: m, r: r, rows: s.rows, cols: s.cols}
	var err error
	switch {
	case m.Format == FormatNone:
		return nil, &DequantError{Module: m.Name, Rule: "no-weight", Msg: "module has no weight to decode"}
	case m.PackedInputs():
		if s.r, err = readAll(m, r); err != nil {
			return nil, err
		}
	case m.Layout == LayoutUnquantized:
		err = s.openDense(d)
	case m.Format == FormatNVFP4 && m.Layout != LayoutModelOptExpertsT:
		err = s.openNVFP4(d)
	case (m.Format == FormatFP8 || m.Format == FormatMXFP8) && m.Layout != LayoutIntChannel:
		err = s.openFP8(d)
	}
	if err != nil {
		return nil, err
	}
	if s.kind == streamGeneric { // the layout's own checks, on no rows
		if _, err := DequantizeWindow(m, s.r, 0, 0, 0, s.cols); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// LimitRows says that no band past row hi will be decoded (a row slice), so
// that a remote reader reads the weight ahead no further.
func (s *RowStream) LimitRows(hi int) {
	if hi > 0 && hi < s.rows {
		s.limit = hi
	}
}

// Shape is the logical [rows, cols] of the weight.
func (s *RowStream) Shape() (rows, cols int) { return s.rows, s.cols }

func (s *RowStream) openDense(d *dq) error {
	w, err := d.weightInfo()
	if err != nil {
		return err
	}
	if w.DType.Bits()%8 != 0 {
		return d.fail(w, "dtype", fmt.Sprintf("no row decoder for %s", w.DType))
	}
	if s.scaleDec, err = numeric.DecoderFor(w.DType); err != nil {
		return d.fail(w, "dtype", err.Error())
	}
	s.w, s.kind = w, streamDense
	return nil
}

func (s *RowStream) openNVFP4(d *dq) error {
	w, err := d.weightInfo()
	if err != nil {
		return err
	}
	if d.cols%16 != 0 {
		return d.fail(w, "nvfp4-shape", fmt.Sprintf("%d columns are not a multiple of the 16-value block", d.cols))
	}
	sc, err := d.need("weight_scale")
	if err != nil {
		return err
	}
	s.global = 1
	if t, ok := d.m.infos.lookup("weight_scale_2"); ok {
		if s.global, err = d.scalar(t); err != nil {
			return err
		}
	} else if t, ok := d.m.infos.lookup("weight_global_scale"); ok {
		gs, err := d.scalar(t)
		if err != nil {
			return err
		}
		if gs == 0 {
			return d.fail(t, "scale-value", "weight_global_scale is 0")
		}
		s.global = 1 / gs
	}
	g, err := d.scaleGrid(sc, 16, nil)
	if err != nil {
		return err
	}
	if g.rowDiv != 1 || g.cols != d.cols/16 {
		return d.fail(sc, "scale-shape", fmt.Sprintf("NVFP4 wants one scale per row and 16 values, shape is %v", sc.Shape))
	}
	if sc.DType.Bits() != 8 {
		return nil // wider scales than the format's E4M3: Dequantize's own path
	}
	if s.scaleDec, err = numeric.DecoderFor(sc.DType); err != nil {
		return d.fail(sc, "dtype", err.Error())
	}
	// Each stored scale code's float32 value times the global scale, the
	// same two float32 operations the band would do, done once a stream.
	codes := make([]byte, 256)
	for b := range codes {
		codes[b] = byte(b)
	}
	s.scaleDec(s.scaleTab[:], codes)
	for b := range s.scaleTab {
		s.scaleTab[b] *= s.global
	}
	for b := range 256 { // nibbles of magnitude code 7, |e2m1| = 6
		if b&7 == 7 {
			s.atMax[b]++
		}
		if b>>4&7 == 7 {
			s.atMax[b]++
		}
	}
	s.w, s.sc, s.kind = w, sc, streamNVFP4
	return nil
}

func (s *RowStream) openFP8(d *dq) error {
	w, err := d.weightInfo()
	if err != nil {
		return err
	}
	sc, ok := d.m.infos.lookup("weight_scale")
	if !ok {
		sc, ok = d.m.infos.lookup("weight_scale_inv")
	}
	if !ok || w.DType.Bits() != 8 {
		return nil // Dequantize's own path says what is wrong
	}
	dec, err := numeric.DecoderFor(w.DType)
	if err != nil {
		return d.fail(w, "dtype", err.Error())
	}
	codes := make([]byte, 256)
	for c := range codes {
		codes[c] = byte(c)
	}
	dec(s.tab[:], codes)
	var top float32
	for _, v := range s.tab {
		if a := float32(math.Abs(float64(v))); a > top && !math.IsInf(float64(a), 0) {
			top = a
		}
	}
	for c, v := range s.tab {
		if float32(math.Abs(float64(v))) == top {
			s.atMax[c] = 1
		}
	}
	groupCols := 0
	if d.m.Format == FormatMXFP8 {
		groupCols = 32
	}
	// scaleGrid also refuses a sub-byte scale dtype (F4), which the band
	// loop would read a byte a scale.
	if s.g, err = d.scaleGrid(sc, groupCols, d.m.Block); err != nil {
		return err
	}
	s.tensorSc = sc.elements() == 1
	if sc.DType == safetensors.U8 && d.m.Format == FormatMXFP8 {
		s.scaleDec = numeric.DecodeE8M0 // uint8 exponents, as scaleFloats reads them
	} else if s.scaleDec, err = numeric.DecoderFor(sc.DType); err != nil {
		return d.fail(sc, "dtype", err.Error())
	}
	s.w, s.sc, s.kind = w, sc, streamFP8
	return nil
}

// readAll reads every tensor of m once and serves reads from memory.
func readAll(m *Module, r TensorReader) (TensorReader, error) {
	mem := memReader{}
	for _, t := range m.infos {
		b, err := r.ReadTensor(t.Name, 0, int64(t.NBytes))
		if err != nil {
			return nil, err
		}
		mem[t.Name] = b
	}
	return mem, nil
}

// memReader serves tensor reads from bytes already read (read-only, so it
// may be shared by concurrent decoders).
type memReader map[string][]byte

func (m memReader) ReadTensor(name string, off, n int64) ([]byte, error) {
	b, ok := m[name]
	if !ok || off < 0 || n < 0 || off+n > int64(len(b)) {
		return nil, fmt.Errorf("tensor %q: read [%d, %d) outside its %d bytes", name, off, off+n, len(b))
	}
	return b[off : off+n : off+n], nil
}

// BandInfo is what a band's stored form tells beyond its values (see
// kernels.BandMeta, which it mirrors field for field).
type BandInfo struct {
	Codes, AtMax                          int64
	Scales                                []float32
	ScaleE4M3, ScaleAtMax, ScaleSubnormal int64
}

// RowDecoder decodes bands of a RowStream into the caller's buffers. It keeps
// scratch buffers between calls: one per goroutine.
type RowDecoder struct {
	s *RowStream
	rowScratch
}

// rowScratch is a decoder's buffers: the stored bytes of a band and their
// decoded scales, a band's worth each.
type rowScratch struct {
	raw    []byte
	sraw   []byte
	scales []float32
	meta   []float32
}

// scratchPool keeps released decoders' buffers for the next stream. Fresh
// memory costs a page fault a 4 KiB page on first touch, and on a virtual
// machine that is the dearest part of a short stream: a worker's 100-odd KiB
// of new buffers took about a quarter of a millisecond on the 2-core VM,
// about what one worker needs for 10 MiB of NVFP4 output.
var scratchPool sync.Pool

// NewDecoder returns a decoder with its own scratch buffers, reusing those a
// released decoder left.
func (s *RowStream) NewDecoder() *RowDecoder {
	d := &RowDecoder{s: s}
	if p, ok := scratchPool.Get().(*rowScratch); ok {
		d.rowScratch = *p
	}
	return d
}

// Release hands the decoder's buffers on to the next decoder. The decoder
// must not be used after it; one never released simply leaves its buffers
// to the collector.
func (d *RowDecoder) Release() {
	if d.raw == nil && d.sraw == nil && d.scales == nil && d.meta == nil {
		return
	}
	p := new(rowScratch)
	*p, d.rowScratch = d.rowScratch, rowScratch{}
	scratchPool.Put(p)
}

func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// read fills a scratch buffer with rows [lo, hi) of t, rowLen bytes a row.
// last, when above 0, is the row of t past which the stream reads nothing
// (LimitRows, in t's rows).
func (d *RowDecoder) read(buf *[]byte, t *TensorInfo, rowLen, lo, hi, last int) ([]byte, error) {
	if need, ok := rowsSize(rowLen, hi); !ok || need > t.NBytes {
		return nil, &DequantError{Module: d.s.m.Name, Tensor: t.Name, Rule: "tensor-size", Msg: fmt.Sprintf("needs %d bytes for %d rows, holds %d", need, hi, t.NBytes)}
	}
	n := (hi - lo) * rowLen
	off := int64(lo) * int64(rowLen)
	if sr, ok := d.s.r.(TensorStreamReader); ok {
		*buf = grow(*buf, n)
		end := int64(t.NBytes)
		if last > 0 {
			if need, ok := rowsSize(rowLen, max(last, hi)); ok {
				end = min(end, int64(need))
			}
		}
		return *buf, sr.ReadTensorWithin(t.Name, *buf, off, end)
	}
	if ri, ok := d.s.r.(TensorReaderInto); ok {
		*buf = grow(*buf, n)
		return *buf, ri.ReadTensorInto(t.Name, *buf, off)
	}
	return d.s.r.ReadTensor(t.Name, off, int64(n))
}

// Decode writes rows [lo, hi) into dst ((hi−lo)·cols values); with info
// not nil it also fills in the band's codes and scales.
func (d *RowDecoder) Decode(dst []float32, lo, hi int, info *BandInfo) error {
	s := d.s
	if lo < 0 || hi < lo || hi > s.rows || len(dst) < (hi-lo)*s.cols {
		return &DequantError{Module: s.m.Name, Rule: "rows", Msg: fmt.Sprintf("rows %d:%d outside 0:%d or buffer too small", lo, hi, s.rows)}
	}
	dst = dst[:(hi-lo)*s.cols]
	switch s.kind {
	case streamDense:
		b, err := d.read(&d.raw, s.w, s.cols*int(s.w.DType.Bits()/8), lo, hi, s.limit)
		if err != nil {
			return err
		}
		s.scaleDec(dst, b)
		return nil
	case streamNVFP4:
		return d.nvfp4(dst, lo, hi, info)
	case streamFP8:
		return d.fp8(dst, lo, hi, info)
	}
	return d.generic(dst, lo, hi, info)
}

func (d *RowDecoder) nvfp4(dst []float32, lo, hi int, info *BandInfo) error {
	s := d.s
	packed, err := d.read(&d.raw, s.w, s.cols/2, lo, hi, s.limit)
	if err != nil {
		return err
	}
	sb, err := d.read(&d.sraw, s.sc, s.cols/16, lo, hi, s.limit)
	if err != nil {
		return err
	}
	d.scales = grow(d.scales, len(sb))
	for i, c := range sb {
		d.scales[i] = s.scaleTab[c]
	}
	numeric.DecodeE2M1Blocks(dst, packed, d.scales, 16)
	if info != nil {
		info.Codes += int64(len(dst))
		var n int64
		for _, b := range packed {
			n += int64(s.atMax[b])
		}
		info.AtMax += n
		info.Scales = append(info.Scales, d.scales...)
		if s.sc.DType == safetensors.F8_E4M3 {
			info.ScaleE4M3 += int64(len(sb))
			for _, c := range sb {
				switch {
				case c&0x7F == 0x7E:
					info.ScaleAtMax++
				case c&0x78 == 0 && c&7 != 0:
					info.ScaleSubnormal++
				}
			}
		}
	}
	return nil
}

func (d *RowDecoder) fp8(dst []float32, lo, hi int, info *BandInfo) error {
	s, g := d.s, d.s.g
	codes, err := d.read(&d.raw, s.w, s.cols, lo, hi, s.limit)
	if err != nil {
		return err
	}
	// The scale rows covering the band (a tensor scale was read at open).
	base, sv := 0, g.vals
	if hi > lo && !s.tensorSc {
		base = lo / g.rowDiv
		top := (hi-1)/g.rowDiv + 1
		eb := int(s.sc.DType.Bits() / 8) // whole bytes: openFP8's scaleGrid refused the others
		last := 0
		if s.limit > 0 {
			last = (s.limit-1)/g.rowDiv + 1
		}
		sb, err := d.read(&d.sraw, s.sc, g.cols*eb, base, top, last)
		if err != nil {
			return err
		}
		d.scales = grow(d.scales, (top-base)*g.cols)
		s.scaleDec(d.scales, sb)
		sv = d.scales
	}
	for r := lo; r < hi; r++ {
		k := r - lo
		row, in := dst[k*s.cols:(k+1)*s.cols], codes[k*s.cols:(k+1)*s.cols]
		srow := sv[(r/g.rowDiv-base)*g.cols:]
		if !s.m.InverseScale && s.w.DType == safetensors.F8_E4M3 {
			numeric.DecodeE4M3Blocks(row, in, srow, g.colDiv) // the row in one call
			continue
		}
		for c0, j := 0, 0; c0 < s.cols; c0, j = c0+g.colDiv, j+1 {
			c1 := min(c0+g.colDiv, s.cols)
			switch {
			case s.m.InverseScale:
				divTable(&s.tab, row[c0:c1], in[c0:c1], srow[j])
			default:
				numeric.MulTable(&s.tab, row[c0:c1], in[c0:c1], srow[j])
			}
		}
	}
	if info == nil {
		return nil
	}
	info.Codes += int64(len(codes))
	var n int64
	for _, b := range codes {
		n += int64(s.atMax[b])
	}
	info.AtMax += n
	// This band owns the scale rows whose first weight row it holds.
	for k := base; k*g.rowDiv < hi && k < base+len(sv)/g.cols; k++ {
		if k*g.rowDiv < lo {
			continue
		}
		for _, v := range sv[(k-base)*g.cols : (k-base+1)*g.cols] {
			if s.m.InverseScale {
				v = 1 / v
			}
			info.Scales = append(info.Scales, v)
		}
	}
	return nil
}

// divTable writes tab[in[i]]/scale (GPT-QModel's inverse scales divide).
func divTable(tab *[256]float32, out []float32, in []byte, scale float32) {
	out = out[:len(in)]
	for i, b := range in {
		out[i] = tab[b] / scale
	}
}

// generic decodes a band with Dequantize (and SampleRows for its codes).
func (d *RowDecoder) generic(dst []float32, lo, hi int, info *BandInfo) error {
	s := d.s
	if info == nil {
		v, err := DequantizeWindow(s.m, s.r, lo, hi, 0, s.cols)
		if err != nil {
			return err
		}
		copy(dst, v)
		return nil
	}
	smp, err := SampleRows(s.m, s.r, lo, hi, 0, s.cols)
	if err != nil {
		return err
	}
	copy(dst, smp.Values)
	// E2M1 codes (MXFP4) are at the maximum at |6|, int codes at either
	// end of their range (countInts lists the whole range in order).
	isInt := strings.HasPrefix(smp.CodeKind, "int")
	if isInt || smp.CodeKind == "e2m1" {
		for i, c := range smp.Codes {
			info.Codes += int64(c.Count)
			if (isInt && (i == 0 || i == len(smp.Codes)-1)) || (!isInt && math.Abs(float64(c.Value)) == numeric.E2M1Max) {
				info.AtMax += int64(c.Count)
			}
		}
	}
	info.Scales = append(info.Scales, smp.Scales...)
	return nil
}
