package scheme

import (
	"fmt"

	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
)

// Packed is a module's weight in its stored form, with the small tensors
// (scales, zero points, g_idx) decoded as Dequantize decodes them: what a
// backend that decodes on its own device (the CUDA worker) needs to compute
// Dequantize's values bit for bit and the band information of every row.
type Packed struct {
	Kind       string // "int", "nvfp4", "mxfp4" or "fp8"
	Rows, Cols int    // the logical weight (GPTQ, AWQ: outputs × inputs)
	// Data is the stored weight: compressed-tensors weight_packed or
	// qweight; NVFP4 nibbles; FP8 codes.
	Data []byte
	// ScaleCodes are NVFP4's E4M3 block scales, [Rows, Cols/16], or MXFP4's
	// E8M0 ones, [Rows, Cols/32].
	ScaleCodes []byte
	// Global is NVFP4's block-scale multiplier (weight_scale_2, or one over
	// weight_global_scale).
	Global float32
	// Scales: int, the group scales ([Rows, groups] for compressed-tensors,
	// [groups, Rows] for GPTQ and AWQ); FP8, the scale grid, row-major, one
	// value an R×C tile.
	Scales []float32
	// IntLayout is "ct-bitstream", "ct-per-word", "gptq" or "awq".
	IntLayout string
	Bits      int
	// Zeros are the zero points as values in the scales' shape (GPTQ v1's
	// stored z − 1 plus one); nil when there are none.
	Zeros []float32
	// GIdx is each input column's group.
	GIdx []int32
	// FP8: the tile of a scale, the element format, divide by the scale.
	R, C          int
	E5M2, Inverse bool
}

// Packed returns the stream's stored form, or nil (and no error) when its
// layout has no packed form here or the weight is empty (the caller decodes
// bands instead):
// compressed-tensors pack-quantized, GPTQ, AWQ, NVFP4 with E4M3 scales,
// MXFP4 with E8M0 (or U8) scales, FP8 and MXFP8 have one.
func (s *RowStream) Packed() (*Packed, error) {
	m := s.m
	if s.rows == 0 || s.cols == 0 {
		return nil, nil // an empty weight: nothing to hand over, and no g_idx sized by its width
	}
	d := &dq{m: m, r: s.r, lo: 0, hi: s.rows, rows: s.rows, cols: s.cols, c0: 0, c1: s.cols}
	switch {
	case m.Layout == LayoutGPTQ || m.Layout == LayoutGPTQv2:
		return d.packedGPTQ()
	case m.Layout == LayoutAWQ:
		return d.packedAWQ()
	case m.Layout == LayoutCTPack:
		return d.packedCT()
	case s.kind == streamNVFP4 && s.sc.DType == safetensors.F8_E4M3:
		data, err := d.all(s.w)
		if err != nil {
			return nil, err
		}
		sc, err := d.all(s.sc)
		if err != nil {
			return nil, err
		}
		if len(data) != s.rows*s.cols/2 || len(sc) != s.rows*s.cols/16 {
			return nil, d.fail(s.w, "tensor-size", fmt.Sprintf("%d packed bytes and %d scales for [%d, %d]", len(data), len(sc), s.rows, s.cols))
		}
		return &Packed{Kind: "nvfp4", Rows: s.rows, Cols: s.cols, Data: data, ScaleCodes: sc, Global: s.global}, nil
	case m.Format == FormatMXFP4 && m.GroupSize == 32:
		return d.packedMXFP4()
	case s.kind == streamFP8 && (s.w.DType == safetensors.F8_E4M3 || s.w.DType == safetensors.F8_E5M2):
		data, err := d.all(s.w)
		if err != nil {
			return nil, err
		}
		if len(data) != s.rows*s.cols {
			return nil, d.fail(s.w, "tensor-size", fmt.Sprintf("%d codes for [%d, %d]", len(data), s.rows, s.cols))
		}
		g := s.g
		if !s.tensorSc { // the whole grid (OpenRows read only its shape)
			groupCols := 0
			if m.Format == FormatMXFP8 {
				groupCols = 32
			}
			if g, err = d.scaleGrid(s.sc, groupCols, m.Block); err != nil {
				return nil, err
			}
		}
		return &Packed{Kind: "fp8", Rows: s.rows, Cols: s.cols, Data: data, Scales: g.vals, R: g.rowDiv, C: g.colDiv,
			E5M2: s.w.DType == safetensors.F8_E5M2, Inverse: m.InverseScale}, nil
	}
	return nil, nil
}

func (d *dq) packedGPTQ() (*Packed, error) {
	qw, err := d.need("qweight")
	if err != nil {
		return nil, err
	}
	in, out, bits := d.cols, d.rows, d.m.Bits
	wr, err := packing.GPTQWeightRows(in, bits)
	if err != nil {
		return nil, d.fail(qw, "qweight", err.Error())
	}
	data, err := d.rowBytes(qw, 4*out, 0, wr)
	if err != nil {
		return nil, err
	}
	scales, zeros, groups, err := d.scalesAndZeros(func(dst []uint8, b []byte, groups int) error {
		return packing.UnpackRowBits(dst, b, groups, out, bits)
	})
	if err != nil {
		return nil, err
	}
	gi, err := d.groupIndex("g_idx", in, groups, d.m.GroupSize)
	if err != nil {
		return nil, err
	}
	p := &Packed{Kind: "int", IntLayout: "gptq", Rows: out, Cols: in, Bits: bits, Data: data, Scales: scales, GIdx: gi}
	if zeros != nil {
		add := float32(0)
		if d.m.Layout == LayoutGPTQ {
			add = 1 // v1 stores z − 1
		}
		p.Zeros = make([]float32, len(zeros))
		for i, z := range zeros {
			p.Zeros[i] = float32(z) + add
		}
	}
	return p, nil
}

func (d *dq) packedAWQ() (*Packed, error) {
	qw, err := d.need("qweight")
	if err != nil {
		return nil, err
	}
	in, out := d.cols, d.rows
	if out%8 != 0 {
		return nil, d.fail(qw, "qweight", fmt.Sprintf("%d outputs are not a multiple of 8", out))
	}
	data, err := d.rowBytes(qw, out/2, 0, in)
	if err != nil {
		return nil, err
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
	gi := make([]int32, in)
	for i := range gi {
		gi[i] = int32(i / (in / groups))
	}
	p := &Packed{Kind: "int", IntLayout: "awq", Rows: out, Cols: in, Bits: 4, Data: data, Scales: scales, GIdx: gi}
	if zeros != nil {
		p.Zeros = make([]float32, len(zeros))
		for i, z := range zeros {
			p.Zeros[i] = float32(z)
		}
	}
	return p, nil
}

// packedCT reads a compressed-tensors pack-quantized weight as ctPack does.
func (d *dq) packedCT() (*Packed, error) {
	w, sc, p, err := d.ctWeight()
	if err != nil {
		return nil, err
	}
	bits, l := d.m.Bits, d.m.packLayout
	data, err := d.rowBytes(w, 4*p, 0, d.rows)
	if err != nil {
		return nil, err
	}
	scales, groups, err := d.ctScales(sc, 0, d.rows)
	if err != nil {
		return nil, err
	}
	name := "ct-bitstream"
	if l == packing.CTPerWord {
		name = "ct-per-word"
	}
	out := &Packed{Kind: "int", IntLayout: name, Rows: d.rows, Cols: d.cols, Bits: bits, Data: data, Scales: scales}
	codes, err := d.ctZeroPoints(bits, l, groups)
	if err != nil {
		return nil, err
	}
	if codes != nil {
		out.Zeros = make([]float32, len(codes))
		for i, c := range codes {
			out.Zeros[i] = float32(c)
		}
	}
	if out.GIdx, err = d.groupIndex("weight_g_idx", d.cols, groups, d.m.GroupSize); err != nil {
		return nil, err
	}
	return out, nil
}

// packedMXFP4 reads an MXFP4 weight (gpt-oss blocks and mx_scales, or
// weight and weight_scale) whose scales are E8M0 bytes.
func (d *dq) packedMXFP4() (*Packed, error) {
	role, scaleRole := "weight", "weight_scale"
	switch {
	case d.m.Layout == LayoutGPTOSS:
		role, scaleRole = "blocks", "mx_scales"
	case d.m.infos.get("weight_packed") != nil:
		role = "weight_packed"
	}
	w, err := d.need(role)
	if err != nil {
		return nil, err
	}
	sc, err := d.need(scaleRole)
	if err != nil {
		return nil, err
	}
	if sc.DType != safetensors.U8 && sc.DType != safetensors.F8_E8M0 {
		return nil, nil
	}
	if d.cols%32 != 0 || sc.elements() != uint64(d.rows*d.cols/32) {
		return nil, d.fail(sc, "scale-shape", fmt.Sprintf("want %d scales for [%d, %d] in 32-value blocks, shape is %v", d.rows*d.cols/32, d.rows, d.cols, sc.Shape))
	}
	data, err := d.rowBytes(w, d.cols/2, 0, d.rows)
	if err != nil {
		return nil, err
	}
	sb, err := d.rowBytes(sc, d.cols/32, 0, d.rows)
	if err != nil {
		return nil, err
	}
	return &Packed{Kind: "mxfp4", Rows: d.rows, Cols: d.cols, Data: data, ScaleCodes: sb}, nil
}
