package scheme

import (
	"fmt"
	"slices"

	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
)

// Severities of a finding.
const (
	SeverityError   = "error"
	SeverityWarning = "warning"
	SeverityInfo    = "info"
)

// Finding is one place where a checkpoint's metadata and bytes disagree, or
// where its bytes break a format rule.
type Finding struct {
	Rule     string `json:"rule"`
	Severity string `json:"severity"`
	Tensor   string `json:"tensor,omitempty"`
	Module   string `json:"module,omitempty"`
	Message  string `json:"message"`
}

// CheckModules applies the per-module rules: the compressed-tensors format
// card's CT-001..CT-005 and the presence, dtype and shape of each format's
// scales.
func CheckModules(mods []*Module, s *Scheme) []Finding {
	var out []Finding
	for _, m := range mods {
		out = append(out, checkModule(m, s)...)
	}
	return out
}

func checkModule(m *Module, s *Scheme) []Finding {
	var out []Finding
	add := func(rule, sev, role, format string, args ...any) {
		f := Finding{Rule: rule, Severity: sev, Module: m.Name, Message: fmt.Sprintf(format, args...)}
		if t, ok := m.infos.lookup(role); ok {
			f.Tensor = t.Name
		} else if w := m.primary(); w != nil {
			f.Tensor = w.Name
		}
		out = append(out, f)
	}
	_, hasPacked := m.infos.lookup("weight_packed")
	_, hasW := m.infos.lookup("weight")
	_, hasS2 := m.infos.lookup("weight_scale_2")
	_, hasGS := m.infos.lookup("weight_global_scale")
	_, hasIS := m.infos.lookup("input_scale")
	_, hasIGS := m.infos.lookup("input_global_scale")
	if (hasPacked && (hasS2 || hasIS)) || (hasW && (hasGS || hasIGS)) {
		add("CT-005", SeverityError, "weight_scale_2", "module mixes ModelOpt names (weight, weight_scale_2, input_scale) with compressed-tensors names (weight_packed, weight_global_scale, input_global_scale): a half-done conversion, whose global scales may or may not be inverted")
	}
	if n := m.rare(); n.scaleRefused != "" {
		add("scale-kind", SeverityError, n.scaleRole, "%s: refused, not decoded the wrong way round", n.scaleRefused)
	}
	if n := m.rare(); n.shapeRejected != "" {
		add("CT-004", SeverityError, "weight_shape", "%s; the logical shape %v is inferred from the packed width instead", n.shapeRejected, m.WeightShape)
	}
	rows, cols := m.Matrix2D()
	sc, hasScale := m.infos.lookup("weight_scale")
	switch {
	case m.Layout == LayoutCTPack:
		out = append(out, checkCTPack(m, s, add)...)
	case m.Format == FormatNVFP4:
		if !hasScale {
			add("scale-missing", SeverityError, "weight", "NVFP4 weight has no weight_scale (block scales)")
		} else {
			if sc.DType != safetensors.F8_E4M3 {
				add("scale-dtype", SeverityError, "weight_scale", "NVFP4 block scales are F8_E4M3, this one is %s", sc.DType)
			}
			want := withLast(m.WeightShape, func(n uint64) uint64 { return (n + 15) / 16 })
			if m.Layout == LayoutModelOptExpertsT { // [E, in/16, out]: the blocks run along the input
				want = []uint64{m.WeightShape[0], m.WeightShape[1] / 16, m.WeightShape[2]}
			}
			if !slices.Equal(sc.Shape, want) {
				add("scale-shape", SeverityError, "weight_scale", "NVFP4 weight %v wants weight_scale %v (one per 16 values), found %v", m.WeightShape, want, sc.Shape)
			}
		}
		if !hasS2 && !hasGS {
			add("scale-missing", SeverityError, "weight", "NVFP4 weight has no global scale (weight_scale_2 or weight_global_scale)")
		}
		if width := cols; m.Layout == LayoutModelOptExpertsT {
			if m.WeightShape[1]%16 != 0 {
				add("nvfp4-shape", SeverityError, "weight", "input width %d is not a multiple of the 16-value block", m.WeightShape[1])
			}
		} else if width%16 != 0 {
			add("nvfp4-shape", SeverityError, "weight", "logical width %d is not a multiple of the 16-value block", cols)
		}
	case m.Format == FormatMXFP4:
		role := "weight_scale"
		if m.Layout == LayoutGPTOSS {
			role = "mx_scales"
		}
		t, ok := m.infos.lookup(role)
		if !ok {
			add("scale-missing", SeverityError, "blocks", "MXFP4 weight has no E8M0 scales")
		} else if t.elements() != rows*((cols+31)/32) {
			add("scale-shape", SeverityError, role, "MXFP4 weight %v wants %d scales (one per 32 values), found shape %v", m.WeightShape, rows*((cols+31)/32), t.Shape)
		} else if !isE8M0Carrier(t.DType) {
			add("scale-dtype", SeverityError, role, "MXFP4 scales are U8/F8_E8M0 exponents, this one is %s", t.DType)
		}
	case m.Format == FormatFP8 || m.Format == FormatMXFP8:
		inv, hasInv := m.infos.lookup("weight_scale_inv")
		switch {
		case !hasScale && !hasInv:
			add("scale-missing", SeverityError, "weight", "FP8 weight has neither weight_scale nor weight_scale_inv: its values are unscaled codes")
		case m.Layout == LayoutFP8Block:
			t, role := sc, "weight_scale"
			if !hasScale {
				t, role = inv, "weight_scale_inv"
			}
			if len(m.Block) != 2 || m.Block[0] <= 0 || m.Block[1] <= 0 {
				add("scale-shape", SeverityError, role, "FP8 weight %v has no block size that scales %v tile: a zero-sized weight dimension cannot hold a block", m.WeightShape, t.Shape)
				break
			}
			br, bc := uint64(m.Block[0]), uint64(m.Block[1])
			want := []uint64{ceilDiv(rows, br), ceilDiv(cols, bc)}
			if !slices.Equal(t.Shape, want) {
				add("scale-shape", SeverityError, role, "FP8 weight %v with %d×%d blocks wants scales %v, found %v", m.WeightShape, br, bc, want, t.Shape)
			}
		}
	case m.PackedInputs():
		scs, ok := m.infos.lookup("scales")
		if !ok {
			add("scale-missing", SeverityError, "qweight", "%s qweight has no scales", m.Layout)
			break
		}
		if _, ok := m.infos.lookup("qzeros"); !ok {
			add("scale-missing", SeverityWarning, "qweight", "%s qweight has no qzeros: decoded as symmetric", m.Layout)
		}
		if len(scs.Shape) != 2 || scs.Shape[1] != rows {
			add("scale-shape", SeverityError, "scales", "scales for %d output columns must be [groups, %d], found %v", rows, rows, scs.Shape)
		} else if m.GroupSize > 0 && scs.Shape[0] != (cols+uint64(m.GroupSize)-1)/uint64(m.GroupSize) {
			add("scale-shape", SeverityError, "scales", "group_size %d over %d inputs wants %d groups, scales hold %d", m.GroupSize, cols, (cols+uint64(m.GroupSize)-1)/uint64(m.GroupSize), scs.Shape[0])
		}
	case m.Layout == LayoutModelOptAWQ:
		if g := uint64(m.GroupSize); g > 0 {
			if want := withLast(m.WeightShape, func(n uint64) uint64 { return ceilDiv(n, g) }); !slices.Equal(sc.Shape, want) {
				add("scale-shape", SeverityError, "weight_scale", "INT4 AWQ weight %v in groups of %d wants weight_scale %v, found %v", m.WeightShape, g, want, sc.Shape)
			}
		}
	case m.Format == "u8" && s.Family == FamilyNVFP4:
		add("scale-missing", SeverityWarning, "weight", "U8 weight in an NVFP4 checkpoint has no block scales")
	}
	checkSubByteScales(m, out, add)
	return out
}

// scaleRoles hold scales and zero points, read a whole number of bytes an
// element.
var scaleRoles = []string{"weight_scale", "weight_scale_inv", "weight_scale_2", "weight_global_scale",
	"weight_zero_point", "input_scale", "input_global_scale", "input_zero_point", "scales", "mx_scales"}

// checkSubByteScales reports scale and zero-point tensors of a sub-byte
// dtype (F4, F6), which no decoder reads, unless a format's own rule already
// named their dtype.
func checkSubByteScales(m *Module, found []Finding, add func(rule, sev, role, format string, args ...any)) {
	for _, role := range scaleRoles {
		t, ok := m.infos.lookup(role)
		if !ok || wholeBytes(t.DType) {
			continue
		}
		if slices.ContainsFunc(found, func(f Finding) bool { return f.Rule == "scale-dtype" && f.Tensor == t.Name }) {
			continue
		}
		add("scale-dtype", SeverityError, role, "%s %s is %d bits an element: scales and zero points take whole bytes", role, t.DType, t.DType.Bits())
	}
}

// wholeBytes reports whether an element of dtype d takes a whole number of
// bytes.
func wholeBytes(d safetensors.DType) bool { return d.Bits() != 0 && d.Bits()%8 == 0 }

func checkCTPack(m *Module, s *Scheme, add func(rule, sev, role, format string, args ...any)) []Finding {
	p := m.infos.get("weight_packed")
	b := m.Bits
	if b < 1 || b > 8 {
		add("CT-001", SeverityError, "weight_packed", "pack-quantized num_bits is %d, outside 1..8", b)
		return nil
	}
	if p.DType != safetensors.I32 {
		add("CT-002", SeverityError, "weight_packed", "pack-quantized weight_packed must be I32 words holding unsigned fields (code + %d), found %s", 1<<(b-1), p.DType)
	}
	ws, ok := m.infos.lookup("weight_shape")
	if !ok {
		add("CT-004", SeverityError, "weight_packed", "pack-quantized module has no weight_shape: the logical width is only bounded to within %d values", 32/b)
	} else if ws.elements() != uint64(len(p.Shape)) {
		add("CT-004", SeverityError, "weight_shape", "weight_shape holds %d values for a %d-D packed weight", ws.elements(), len(p.Shape))
	} else if m.ShapeInferred && m.rare().shapeRejected == "" {
		add("CT-004", SeverityInfo, "weight_shape", "weight_shape values were not read; logical width %d is inferred from the packed width, within %d values", m.WeightShape[len(m.WeightShape)-1], 32/b)
	}
	if len(p.Shape) == 0 || len(m.WeightShape) != len(p.Shape) {
		return nil
	}
	last := len(p.Shape) - 1
	if !slices.Equal(p.Shape[:last], m.WeightShape[:last]) {
		add("CT-004", SeverityError, "weight_shape", "weight_shape %v disagrees with packed %v outside the packed dimension", m.WeightShape, p.Shape)
	}
	cols := int(m.WeightShape[last])
	l := m.packLayout
	want := packing.CTWordsPerRow(cols, b, l)
	if got := p.Shape[last]; got != uint64(want) {
		other := packing.CTBitstream
		if l == packing.CTBitstream {
			other = packing.CTPerWord
		}
		if got == uint64(packing.CTWordsPerRow(cols, b, other)) {
			add("CT-003", SeverityError, "weight_packed", "%d values of %d bits take %d words in the %s layout that version %q implies, but %d as stored: the file uses the %s layout",
				cols, b, want, l, s.Version, got, other)
		} else {
			add("CT-004", SeverityError, "weight_packed", "packed width %d words cannot hold logical width %d at %d bits (want %d)", got, cols, b, want)
		}
	}
	if sc, ok := m.infos.lookup("weight_scale"); ok && len(sc.Shape) >= 1 {
		if sc.Shape[0] != m.WeightShape[0] {
			add("scale-shape", SeverityError, "weight_scale", "weight_scale %v has %d rows, the weight %d", sc.Shape, sc.Shape[0], m.WeightShape[0])
		} else if g := m.GroupSize; g > 0 && len(sc.Shape) == 2 && sc.Shape[1] != uint64((cols+g-1)/g) {
			add("scale-shape", SeverityError, "weight_scale", "group_size %d over %d columns wants %d groups, weight_scale holds %d", g, cols, (cols+g-1)/g, sc.Shape[1])
		}
	} else {
		add("scale-missing", SeverityError, "weight_packed", "pack-quantized module has no weight_scale")
	}
	return nil
}

// primary is the tensor that holds the module's weight codes.
func (m *Module) primary() *TensorInfo {
	for _, r := range []string{"weight_packed", "weight", "qweight", "blocks", "tensor"} {
		if t, ok := m.infos.lookup(r); ok {
			return t
		}
	}
	return nil
}

// Primary is the name of the tensor that holds the module's weight codes.
func (m *Module) Primary() string {
	if t := m.primary(); t != nil {
		return t.Name
	}
	return ""
}
