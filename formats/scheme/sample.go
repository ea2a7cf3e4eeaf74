package scheme

import (
	"fmt"
	"math"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
)

// Sample is a few rows of a module as stored and as dequantized: what the
// page shows for a module without fetching more than those rows.
type Sample struct {
	Module   string `json:"module"`
	RowStart int    `json:"row_start"`
	Rows     int    `json:"rows"`
	Cols     int    `json:"cols"` // the logical row's width
	// Values holds rows × (ColEnd − ColStart) values, row-major: the whole
	// rows, or for GPTQ and AWQ (packed along the input dimension) a window.
	ColStart int       `json:"col_start"`
	ColEnd   int       `json:"col_end"`
	Values   []float32 `json:"-"`
	// CodeKind names the stored codes ("e4m3", "e2m1", "int4", ...); empty
	// for unquantized weights. Codes counts each code in the sampled rows.
	CodeKind string      `json:"code_kind,omitempty"`
	Codes    []CodeCount `json:"codes,omitempty"`
	// Scales are the block, group, channel or tensor scales that apply to the
	// sampled rows, as multipliers (NVFP4's include the global scale).
	Scales []float32 `json:"scales,omitempty"`
}

// CodeCount is one stored code, the value it stands for before scaling, and
// how often it occurs.
type CodeCount struct {
	Code  int     `json:"code"`
	Value float32 `json:"value"`
	Count int     `json:"count"`
}

// SampleRows dequantizes rows [lo, hi) of a module, columns [c0, c1), and
// gathers the codes and scales of what it read.
func SampleRows(m *Module, r TensorReader, lo, hi, c0, c1 int) (*Sample, error) {
	vals, err := DequantizeWindow(m, r, lo, hi, c0, c1)
	if err != nil {
		return nil, err
	}
	rows, cols := m.Matrix2D()
	s := &Sample{Module: m.Name, RowStart: lo, Rows: hi - lo, Cols: int(cols), ColStart: c0, ColEnd: c1, Values: vals}
	d := &dq{m: m, r: r, lo: lo, hi: hi, rows: int(rows), cols: int(cols), c0: c0, c1: c1}
	if hi == lo || rows == 0 || cols == 0 {
		return s, nil // no values: nothing stored to count
	}
	switch {
	case (m.Format == FormatNVFP4 || m.Format == FormatMXFP4) && m.Layout != LayoutModelOptExpertsT:
		err = d.sampleE2M1(s)
	case m.Format == FormatFP8 || m.Format == FormatMXFP8:
		err = d.sampleFP8(s)
	case m.Layout == LayoutCTPack:
		err = d.sampleCTPack(s)
	case m.Layout == LayoutModelOptAWQ:
		err = d.sampleModelOptAWQ(s)
	case m.PackedInputs():
		err = d.sampleGPTQ(s)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (d *dq) sampleE2M1(s *Sample) error {
	role := "weight"
	switch {
	case d.m.Layout == LayoutGPTOSS:
		role = "blocks"
	case d.m.infos.get("weight_packed") != nil:
		role = "weight_packed"
	}
	w, err := d.need(role)
	if err != nil {
		return err
	}
	b, err := d.rowBytes(w, d.cols/2, d.lo, d.hi)
	if err != nil {
		return err
	}
	var n [16]int
	for _, x := range b {
		n[x&15]++
		n[x>>4]++
	}
	s.CodeKind = "e2m1"
	for c := range 16 {
		s.Codes = append(s.Codes, CodeCount{Code: c, Value: numeric.E2M1ToFloat32(byte(c)), Count: n[c]})
	}
	// Block scales of the rows: E4M3 times the global scale, or E8M0.
	scaleRole := "weight_scale"
	if d.m.Layout == LayoutGPTOSS {
		scaleRole = "mx_scales"
	}
	sc, err := d.need(scaleRole)
	if err != nil {
		return err
	}
	per := d.cols / d.m.GroupSize
	eb, err := d.scaleBytes(sc)
	if err != nil {
		return err
	}
	sb, err := d.rowBytes(sc, per*eb, d.lo, d.hi)
	if err != nil {
		return err
	}
	if s.Scales, err = d.scaleFloats(sc, sb); err != nil {
		return err
	}
	if d.m.Format == FormatNVFP4 {
		global := float32(1)
		if t, ok := d.m.infos.lookup("weight_scale_2"); ok {
			global, err = d.scalar(t)
		} else if t, ok := d.m.infos.lookup("weight_global_scale"); ok {
			var g float32
			if g, err = d.scalar(t); err == nil && g != 0 {
				global = 1 / g
			}
		}
		if err != nil {
			return err
		}
		for i := range s.Scales {
			s.Scales[i] *= global
		}
	}
	return nil
}

func (d *dq) sampleFP8(s *Sample) error {
	w, err := d.weightInfo()
	if err != nil {
		return err
	}
	b, err := d.rowBytes(w, d.cols, d.lo, d.hi)
	if err != nil {
		return err
	}
	var n [256]int
	for _, x := range b {
		n[x]++
	}
	dec, err := numeric.DecoderFor(w.DType)
	if err != nil {
		return d.fail(w, "dtype", err.Error())
	}
	codes := make([]byte, 256)
	vals := make([]float32, 256)
	for c := range codes {
		codes[c] = byte(c)
	}
	dec(vals, codes)
	s.CodeKind = map[safetensors.DType]string{safetensors.F8_E4M3: "e4m3", safetensors.F8_E5M2: "e5m2",
		safetensors.F8_E4M3FNUZ: "e4m3fnuz", safetensors.F8_E5M2FNUZ: "e5m2fnuz"}[w.DType]
	for c := range 256 {
		if n[c] > 0 {
			s.Codes = append(s.Codes, CodeCount{Code: c, Value: vals[c], Count: n[c]})
		}
	}
	sc, ok := d.m.infos.lookup("weight_scale")
	if !ok {
		sc, ok = d.m.infos.lookup("weight_scale_inv")
	}
	if !ok {
		return nil
	}
	groupCols := 0
	if d.m.Format == FormatMXFP8 {
		groupCols = 32
	}
	g, err := d.scaleGrid(sc, groupCols, d.m.Block)
	if err != nil {
		return err
	}
	s.Scales = g.vals
	if d.m.InverseScale {
		for i, v := range s.Scales {
			s.Scales[i] = 1 / v
		}
	}
	return nil
}

func countInts(s *Sample, bits int, signed bool, get func(i int) int, n int) {
	counts := make([]int, 1<<bits)
	off := 0
	if signed {
		off = 1 << (bits - 1)
	}
	for i := range n {
		if v := get(i) + off; v >= 0 && v < len(counts) {
			counts[v]++
		}
	}
	s.CodeKind = fmt.Sprintf("int%d", bits)
	for c, k := range counts {
		s.Codes = append(s.Codes, CodeCount{Code: c - off, Value: float32(c - off), Count: k})
	}
}

func (d *dq) sampleCTPack(s *Sample) error {
	w, err := d.weightInfo()
	if err != nil {
		return err
	}
	p := packing.CTWordsPerRow(d.cols, d.m.Bits, d.m.packLayout)
	b, err := d.rowBytes(w, 4*p, d.lo, d.hi)
	if err != nil {
		return err
	}
	codes := make([]int8, (d.hi-d.lo)*d.cols)
	if err := packing.UnpackCT(codes, b, d.hi-d.lo, d.cols, d.m.Bits, d.m.packLayout); err != nil {
		return d.fail(w, "CT-003", err.Error())
	}
	countInts(s, d.m.Bits, true, func(i int) int { return int(codes[i]) }, len(codes))
	if sc, ok := d.m.infos.lookup("weight_scale"); ok {
		g, err := d.scaleGrid(sc, 0, nil)
		if err != nil {
			return err
		}
		s.Scales = g.vals
	}
	return nil
}

// sampleModelOptAWQ counts the signed 4-bit codes of the sampled rows
// (read by the pairs of rows they are packed in) and gathers their group
// scales.
func (d *dq) sampleModelOptAWQ(s *Sample) error {
	codes, err := d.modeloptCodes()
	if err != nil {
		return err
	}
	countInts(s, 4, true, func(i int) int { return int(codes[i]) }, len(codes))
	if sc, ok := d.m.infos.lookup("weight_scale"); ok {
		g, err := d.scaleGrid(sc, d.m.GroupSize, nil)
		if err != nil {
			return err
		}
		s.Scales = g.vals
	}
	return nil
}

func (d *dq) sampleGPTQ(s *Sample) error {
	qw, err := d.need("qweight")
	if err != nil {
		return err
	}
	out, w, n := d.rows, d.c1-d.c0, d.hi-d.lo
	codes := make([]uint8, w*n)
	if d.m.Layout == LayoutAWQ {
		b, err := d.rowBytes(qw, out/2, d.c0, d.c1)
		if err != nil {
			return err
		}
		all := make([]uint8, w*out)
		if err := packing.UnpackAWQ(all, b, w, out); err != nil {
			return d.fail(qw, "qweight", err.Error())
		}
		for i := range w {
			copy(codes[i*n:(i+1)*n], all[i*out+d.lo:i*out+d.hi])
		}
	} else {
		if err := d.gptqCodes(qw, codes); err != nil {
			return err
		}
	}
	countInts(s, d.m.Bits, false, func(k int) int { return int(codes[k]) }, len(codes))
	if sc, ok := d.m.infos.lookup("scales"); ok && len(sc.Shape) == 2 {
		b, err := d.all(sc)
		if err != nil {
			return err
		}
		all, err := d.floats(sc, b)
		if err != nil {
			return err
		}
		groups := int(sc.Shape[0])
		for g := range groups {
			s.Scales = append(s.Scales, all[g*out+d.lo:g*out+d.hi]...)
		}
	}
	return nil
}

// Stats summarise decoded values. NaN and ±inf are counted apart and left
// out of the moments.
type Stats struct {
	Min, Max, Mean, Std float64
	NaN, Inf            int
}

// ValueStats computes Stats in two passes (the second for the spread, which
// a one-pass sum of squares loses on large tensors).
func ValueStats(v []float32) Stats {
	st := Stats{Min: math.Inf(1), Max: math.Inf(-1)}
	var sum float64
	n := 0
	for _, x := range v {
		f := float64(x)
		switch {
		case f != f:
			st.NaN++
			continue
		case math.IsInf(f, 0):
			st.Inf++
			continue
		}
		st.Min, st.Max = math.Min(st.Min, f), math.Max(st.Max, f)
		sum += f
		n++
	}
	if n == 0 {
		return Stats{Min: math.NaN(), Max: math.NaN(), Mean: math.NaN(), Std: math.NaN(), NaN: st.NaN, Inf: st.Inf}
	}
	st.Mean = sum / float64(n)
	var sq float64
	for _, x := range v {
		if f := float64(x); f == f && !math.IsInf(f, 0) {
			sq += (f - st.Mean) * (f - st.Mean)
		}
	}
	st.Std = math.Sqrt(sq / float64(n))
	return st
}
