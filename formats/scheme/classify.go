package scheme

import (
	"fmt"
	"slices"

	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
)

// classify reads what a module's tensors are: its stored format, layout,
// bits, group and logical shape, from their dtypes and shapes against the
// scheme the configs declare (Group calls it for every module).
func classify(m *Module, s *Scheme, shapes ShapeValues) {
	in := m.infos
	for _, t := range in {
		role := t.Role
		m.Bytes += t.NBytes
		if role == "bias" || (role != "weight" && role != "tensor" && !metadataRoles[role] &&
			role != "weight_packed" && role != "qweight" && role != "blocks") {
			n := m.rareToWrite()
			if n.extraParams == nil {
				n.extraParams, n.extraBytes = map[string]uint64{}, map[string]uint64{}
			}
			f := dtypeFormat(t.DType)
			n.extraParams[f] += t.elements()
			n.extraBytes[f] += t.NBytes
		}
	}
	w, packed, qw, blocks := in.get("weight"), in.get("weight_packed"), in.get("qweight"), in.get("blocks")
	if w == nil && packed == nil && qw == nil && blocks == nil {
		w = in.get("tensor")
	}
	switch {
	case blocks != nil:
		classifyMXBlocks(m, blocks)
	case packed != nil:
		classifyPacked(m, packed, s, shapes)
	case qw != nil:
		classifyGPTQorAWQ(m, qw, s)
	case w != nil:
		classifyWeight(m, w, s)
	default:
		m.Format = FormatNone
		m.Layout = ""
	}
	if m.WeightShape == nil {
		m.WeightShape = []uint64{}
	}
	var p uint64
	if m.Format != FormatNone {
		p = 1
		for _, d := range m.WeightShape {
			p *= d
		}
	}
	m.BiasParameters = sumValues(m.rare().extraParams)
	m.Parameters = p + m.BiasParameters
}

func withLast(shape []uint64, f func(uint64) uint64) []uint64 {
	out := slices.Clone(shape)
	if len(out) > 0 {
		out[len(out)-1] = f(out[len(out)-1])
	}
	return out
}

func classifyMXBlocks(m *Module, b *TensorInfo) {
	m.Format, m.Layout, m.Bits, m.GroupSize, m.Quantized = FormatMXFP4, LayoutGPTOSS, 4, 32, true
	if len(b.Shape) >= 2 {
		m.WeightShape = append(slices.Clone(b.Shape[:len(b.Shape)-2]), b.Shape[len(b.Shape)-2]*b.Shape[len(b.Shape)-1]*2)
	} else {
		m.WeightShape = withLast(b.Shape, func(n uint64) uint64 { return 2 * n })
	}
}

func classifyPacked(m *Module, p *TensorInfo, s *Scheme, shapes ShapeValues) {
	m.Quantized = true
	scale := m.infos.get("weight_scale")
	switch {
	case p.DType == safetensors.U8 && scale != nil && isE8M0Carrier(scale.DType):
		m.Format, m.Layout, m.Bits, m.GroupSize = FormatMXFP4, LayoutCT, 4, 32
	case p.DType == safetensors.U8:
		m.Format, m.Layout, m.Bits, m.GroupSize = FormatNVFP4, LayoutCT, 4, 16
	default:
		m.Layout = LayoutCTPack
		m.packLayout = ctLayoutOf(s)
		m.Bits, m.GroupSize, m.Symmetric = 4, 0, true
		if g := s.groupFor(m.Name); g != nil && g.Weights != nil {
			m.Bits, m.GroupSize, m.Symmetric = g.Weights.NumBits, g.Weights.GroupSize, g.Weights.Symmetric
			if g.Weights.Strategy == "channel" {
				m.GroupSize = 0
			}
		} else if s.Bits != 0 {
			m.Bits, m.GroupSize = s.Bits, s.GroupSize
		}
		if m.infos.get("weight_zero_point") != nil {
			m.Symmetric = false
		}
		m.Format = fmt.Sprintf("int%d", m.Bits)
	}
	// weight_shape must fit the packed words in either layout (the wrong
	// one is CT-003, reported by the rules): at most 32·P/bits values.
	if v, ok := weightShapeValues(m, shapes); ok {
		why := badWeightShape(v, packedWidth(m, p, packing.CTBitstream))
		if why == "" {
			m.WeightShape = make([]uint64, len(v))
			for i, x := range v {
				m.WeightShape[i] = uint64(x)
			}
			return
		}
		m.rareToWrite().shapeRejected = fmt.Sprintf("weight_shape values %v: %s", v, why)
	}
	// Without usable weight_shape values the packed width bounds the
	// logical width.
	m.WeightShape = packedWidth(m, p, ctLayoutOf(s))
	if p.DType == safetensors.U8 {
		return
	}
	m.ShapeInferred = m.infos.get("weight_shape") != nil
	// A group scale [out, ceil(in/g)] narrows the bound.
	if sc := m.infos.get("weight_scale"); sc != nil && m.GroupSize > 0 && len(sc.Shape) == len(p.Shape) && len(sc.Shape) > 0 {
		if lim := saturatingMul(sc.Shape[len(sc.Shape)-1], uint64(m.GroupSize)); lim < m.WeightShape[len(m.WeightShape)-1] {
			m.WeightShape[len(m.WeightShape)-1] = lim
		}
	}
}

func classifyGPTQorAWQ(m *Module, qw *TensorInfo, s *Scheme) {
	m.Quantized = true
	p := s.DynamicFor(m.Name) // the base config, or a dynamic rule's overrides
	m.Bits = p.Bits
	if m.Bits == 0 {
		m.Bits = 4
	}
	sc := m.infos.get("scales")
	isAWQ := s.Method == "awq"
	if s.Method != "awq" && s.Method != "gptq" && sc != nil && len(sc.Shape) == 2 && len(qw.Shape) == 2 {
		isAWQ = qw.Shape[1]*8 == sc.Shape[1] && qw.Shape[1] != sc.Shape[1]
	}
	if len(qw.Shape) != 2 {
		m.Format, m.Layout = fmt.Sprintf("int%d", m.Bits), LayoutGPTQ
		m.WeightShape = slices.Clone(qw.Shape)
		return
	}
	if isAWQ {
		m.Bits = 4
		m.Format, m.Layout = "int4", LayoutAWQ
		m.WeightShape = []uint64{qw.Shape[1] * 8, qw.Shape[0]}
	} else {
		m.Format, m.Layout = fmt.Sprintf("int%d", m.Bits), LayoutGPTQ
		switch {
		case s.CheckpointFormat == "gptq_p" && m.Bits != 2 && m.Bits != 4 && m.Bits != 8:
			m.Layout = LayoutGPTQp
		case s.CheckpointFormat == "gptq_v2", s.CheckpointFormat == "gptq_p": // gptq_p's 2/4/8-bit words are the continuous ones
			m.Layout = LayoutGPTQv2
		}
		m.WeightShape = []uint64{qw.Shape[1], qw.Shape[0] * 32 / uint64(m.Bits)}
	}
	m.GroupSize = p.GroupSize
	if m.GroupSize <= 0 && sc != nil && len(sc.Shape) == 2 && sc.Shape[0] > 0 {
		m.GroupSize = int(m.WeightShape[1] / sc.Shape[0])
	}
	if p.Symmetric != nil {
		m.Symmetric = *p.Symmetric
	}
}

func classifyWeight(m *Module, w *TensorInfo, s *Scheme) {
	m.WeightShape = slices.Clone(w.Shape)
	sc, inv := m.infos.get("weight_scale"), m.infos.get("weight_scale_inv")
	switch {
	case w.DType == safetensors.U8 && sc != nil && isWideFloat(sc.DType) && s.modeloptInt(m.Name):
		m.Format, m.Layout, m.Bits, m.Quantized = "int4", LayoutModelOptAWQ, 4, true
		n := len(m.WeightShape)
		if n >= 2 { // pairs of output rows a byte (of each expert's, for [E, out/2, in])
			m.WeightShape[n-2] *= 2
		}
		m.GroupSize = s.GroupSize
		if k := len(sc.Shape); n >= 1 && k >= 1 && sc.Shape[k-1] > 0 && m.WeightShape[n-1]%sc.Shape[k-1] == 0 {
			m.GroupSize = int(m.WeightShape[n-1] / sc.Shape[k-1])
		}
	case w.DType == safetensors.U8 && sc != nil && sc.DType == safetensors.F8_E4M3 && stackedTransposed(m, w, sc):
		m.Format, m.Layout, m.Bits, m.GroupSize, m.Quantized = FormatNVFP4, LayoutModelOptExpertsT, 4, 16, true
		m.WeightShape = []uint64{w.Shape[0], 2 * w.Shape[1], w.Shape[2]} // [E, in, out], as the export stores it
	case w.DType == safetensors.U8 && sc != nil && (sc.DType == safetensors.F8_E4M3 || m.infos.get("weight_scale_2") != nil):
		m.Format, m.Layout, m.Bits, m.GroupSize, m.Quantized = FormatNVFP4, LayoutModelOpt, 4, 16, true
		m.WeightShape = withLast(w.Shape, func(n uint64) uint64 { return 2 * n })
	case w.DType == safetensors.U8 && sc != nil && isE8M0Carrier(sc.DType) && s.Family == FamilyMXFP4:
		m.Format, m.Layout, m.Bits, m.GroupSize, m.Quantized = FormatMXFP4, LayoutModelOpt, 4, 32, true
		m.WeightShape = withLast(w.Shape, func(n uint64) uint64 { return 2 * n })
	case w.DType == safetensors.U8 && s.Family == FamilyNVFP4 && m.Kind != "embedding" && m.Kind != "norm":
		// an FP4 label on U8 bytes with no scales: counted as packed pairs, flagged by the rules
		m.Format, m.Layout, m.Bits, m.GroupSize, m.Quantized = FormatNVFP4, LayoutModelOpt, 4, 16, true
		m.WeightShape = withLast(w.Shape, func(n uint64) uint64 { return 2 * n })
	case isFP8(w.DType) && sc != nil && isE8M0Carrier(sc.DType):
		m.Format, m.Layout, m.Bits, m.GroupSize, m.Quantized = FormatMXFP8, LayoutCT, 8, 32, true
	case isFP8(w.DType):
		m.Format, m.Bits, m.Quantized = FormatFP8, 8, true
		m.InverseScale = s.InverseFP8Scales
		scale, role := sc, "weight_scale"
		if scale == nil {
			scale, role = inv, "weight_scale_inv"
		}
		if scale != nil {
			if why := scaleKindMismatch(s.fileScale, role); why != "" {
				n := m.rareToWrite()
				n.scaleRefused, n.scaleRole = why, role
			}
		}
		m.Layout = fp8Layout(m, w, scale, s)
	case w.DType == safetensors.I8 && (sc != nil || inv != nil):
		m.Format, m.Layout, m.Bits, m.Quantized = "int8", LayoutIntChannel, 8, true
		if zp := m.infos.get("weight_zero_point"); zp == nil {
			m.Symmetric = true
		}
		if sc != nil && len(sc.Shape) == 2 && len(w.Shape) == 2 && sc.Shape[1] > 1 {
			m.GroupSize = int((w.Shape[1] + sc.Shape[1] - 1) / sc.Shape[1])
		}
	default:
		m.Format, m.Layout = dtypeFormat(w.DType), LayoutUnquantized
	}
}

// ctBlock is the block_structure [R, C] of the compressed-tensors config
// group that quantizes module name with strategy "block" (nil when none
// does, or it is not two sizes in 1..maxBlock). compressed-tensors tiles
// the weight by it, the last blocks partial: a [576, in] weight in 128-row
// blocks has 5 scale rows, which the scale's shape alone would read as
// blocks of 116.
func ctBlock(s *Scheme, name string) []int {
	if s == nil || len(s.Groups) == 0 {
		return nil
	}
	g := s.groupFor(name)
	if g == nil || g.Weights == nil || g.Weights.Strategy != "block" {
		return nil
	}
	b := g.Weights.BlockStructure
	if len(b) != 2 || b[0] <= 0 || b[1] <= 0 || b[0] > maxBlock || b[1] > maxBlock {
		return nil
	}
	return b
}

// fp8Layout reads the scale's shape against the weight's.
func fp8Layout(m *Module, w, scale *TensorInfo, s *Scheme) string {
	if scale == nil {
		return LayoutFP8Tensor // no scale at all: the rules report it
	}
	n := scale.elements()
	if n == 1 {
		return LayoutFP8Tensor
	}
	if len(w.Shape) != 2 {
		return LayoutFP8Channel
	}
	out, in := w.Shape[0], w.Shape[1]
	if n == out && (len(scale.Shape) == 1 || (len(scale.Shape) == 2 && scale.Shape[1] == 1)) {
		return LayoutFP8Channel
	}
	if len(scale.Shape) == 2 {
		br, bc := 128, 128
		if b := s.DynamicFor(m.Name).WeightBlockSize; len(b) == 2 { // the config's, or a dynamic rule's
			br, bc = b[0], b[1]
		} else if b := ctBlock(s, m.Name); b != nil {
			br, bc = b[0], b[1]
		} else if scale.Shape[0] > 0 && scale.Shape[1] > 0 {
			br, bc = blockOf(out, scale.Shape[0]), blockOf(in, scale.Shape[1])
		}
		if scale.Shape[0] == out && scale.Shape[1] > 1 {
			m.GroupSize = blockOf(in, scale.Shape[1])
			return LayoutFP8Group
		}
		// A zero-sized weight dimension gives no block: Block stays unset
		// and the rules report the scale (a block of 0 divided by zero).
		if br > 0 && bc > 0 {
			m.Block = []int{br, bc}
		}
		return LayoutFP8Block
	}
	return LayoutFP8Channel
}

// stackedTransposed says whether a U8 weight named as its module (ModelOpt's
// stacked experts, {name} beside {name}_weight_scale) is stored as its
// export writes Llama 4's and gpt-oss's: [E, in/2, out] with scales
// [E, in/16, out] (unified_export_hf transposes them back after
// quantizing along the input).
func stackedTransposed(m *Module, w, sc *TensorInfo) bool {
	return w.Name == m.Name && len(w.Shape) == 3 && len(sc.Shape) == 3 && sc.Shape[0] == w.Shape[0] &&
		sc.Shape[2] == w.Shape[2] && sc.Shape[1]*8 == w.Shape[1] && w.Shape[1] > 0
}
