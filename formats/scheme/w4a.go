package scheme

import "fmt"

// W4AGroup is the only group size GPT-QModel's W4A linears take
// (W4AFP8Linear, W4ANVFP4Linear: bits 4, group 128, symmetric, desc_act
// off); kernels.W4AGroup is this value.
const W4AGroup = 128

// W4AReady says whether GPT-QModel's W4A path can run module m of a
// checkpoint declared by s (nil: no config), and when not, the rule and
// why: a GPTQ INT4 weight in group-128 with symmetric zero points and no
// act-order, each read per module (dynamic overrides apply). The forward
// refuses a model by it; fit stages copies only of the modules it passes.
func W4AReady(m *Module, s *Scheme) (rule, why string) {
	if m.Layout != LayoutGPTQ && m.Layout != LayoutGPTQv2 {
		return "w4a-format", fmt.Sprintf("stored %s (layout %q); --w4a needs GPTQ INT4 weights (bits 4, sym, group 128, desc_act false)", m.Format, m.Layout)
	}
	if m.Bits != 4 {
		return "w4a-bits", fmt.Sprintf("GPTQ bits %d; W4A takes bits 4", m.Bits)
	}
	if m.GroupSize != W4AGroup {
		return "w4a-group", fmt.Sprintf("group size %d; W4A takes group 128", m.GroupSize)
	}
	if s == nil {
		return "", ""
	}
	p := s.DynamicFor(m.Name)
	says := "quantization_config says"
	if p.Rule != "" {
		says = fmt.Sprintf("quantization_config (dynamic rule %q) says", p.Rule)
	}
	if p.Symmetric != nil && !*p.Symmetric {
		return "w4a-sym", says + " sym false; W4A takes symmetric INT4 (zero point 8)"
	}
	if p.DescAct {
		return "w4a-desc-act", says + " desc_act true; W4A takes g_idx = i/128"
	}
	return "", ""
}
