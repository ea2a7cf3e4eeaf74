package scheme

import (
	"strings"

	"github.com/quantscope/quantscope/formats/packing"
)

const ctPerWord = packing.CTPerWord

func ctLayoutOf(s *Scheme) packing.CTLayout { return packing.CTLayoutForVersion(s.Version) }

// groupFor is the compressed-tensors config group that targets a module:
// one that names it (its name or a dotted suffix of it), else one whose
// "re:" pattern matches it, else one that targets its class (Linear), as
// compressed-tensors applies a config and vLLM loads one: a mixed-precision
// recipe's "re:.*down_proj" group at 8 bits holds down_proj even when a
// "Linear" group at 4 bits comes first. Among groups of one kind, the first
// in the file.
func (s *Scheme) groupFor(name string) *ConfigGroup {
	c := s.compiled()
	if c.ignoreL.first(name, false) >= 0 {
		return nil
	}
	for _, match := range []func(*patternList) bool{
		func(l *patternList) bool { return l.names(name) },
		func(l *patternList) bool { return l.first(name, false) >= 0 },
		func(l *patternList) bool { return l.first(name, true) >= 0 },
	} {
		for i, g := range c.groupL {
			if match(g) {
				return &s.Groups[i]
			}
		}
	}
	return nil
}

// Declared says whether the config files call a module quantized. known is
// false when they say nothing either way (an unquantized repo, or a method
// whose configs list no modules).
func (s *Scheme) Declared(m *Module) (quantized, known bool) {
	linear := isLinearLike(m)
	if m.Kind == "router" {
		// MoE routers are built unquantized by the runtimes whatever a
		// config's targets say; only an explicit exclusion is a statement.
		return false, s.ExcludedBy(m.Name) != ""
	}
	switch s.Method {
	case "modelopt":
		if s.QuantAlgo == "MIXED_PRECISION" {
			_, ok := s.QuantizedLayers[m.Name]
			return ok, linear || ok
		}
		if s.modeloptExcluded(m.Name) >= 0 {
			return false, true
		}
		return linear, linear
	case "compressed-tensors":
		c := s.compiled()
		if c.ignoreL.first(m.Name, false) >= 0 {
			return false, true
		}
		for _, g := range c.groupL {
			if g.first(m.Name, linear) >= 0 {
				return true, true
			}
		}
		return false, linear
	case "gptq", "awq", "mxfp4", "fp8":
		if s.ExcludedBy(m.Name) != "" {
			return false, true
		}
		if len(s.Dynamic) > 0 && s.DynamicFor(m.Name).Skip { // a "-:" dynamic rule
			return false, true
		}
		if s.Method == "mxfp4" {
			return m.Kind == "experts" && linear, m.Kind == "experts"
		}
		// These configs name only what they leave out; which other linears
		// (routers, heads) were quantized is not written down, so only an
		// explicit exclusion is known.
		return linear, false
	}
	return false, false
}

// isLinearLike: a module with a matrix weight that is not an embedding or
// norm, or routed experts stacked in one 3-D tensor. Other weights of more
// dimensions (a Mamba or gated-delta-net conv1d [C, 1, K]) are no Linear:
// vLLM builds them unquantized whatever a "Linear" target says.
func isLinearLike(m *Module) bool {
	if m.Kind == "embedding" || m.Kind == "norm" || m.Format == FormatNone {
		return false
	}
	return len(m.WeightShape) == 2 || len(m.WeightShape) == 3 && m.Kind == "experts"
}

// ExcludedBy returns the exclude_modules / ignore / modules_to_not_convert
// entry that names a module (the first in list order), or "" when none does.
// exclude_modules are Python fnmatch wildcards ('*' crosses dots); a
// compressed-tensors ignore entry is "re:" + a regular expression matched at
// the start of the name, or a module name or dotted name suffix;
// modules_to_not_convert is a module name, a dotted prefix or suffix of one,
// or a wildcard (see match.go).
func (s *Scheme) ExcludedBy(name string) string {
	c := s.compiled()
	if s.Method == "modelopt" {
		if i := s.modeloptExcluded(name); i >= 0 {
			return s.ExcludeModules[i]
		}
		return ""
	}
	if i := c.ignoreL.first(name, false); i >= 0 {
		return s.Ignore[i]
	}
	return ""
}

// modeloptExcluded is the index of the exclude_modules entry that matches
// name, or -1. A multimodal export names its decoder language_model.…
// while its list may name the bare module (Llama 4's "lm_head" for
// language_model.lm_head): the name is tried without that prefix too, as
// vLLM's ModelOpt config matches it.
func (s *Scheme) modeloptExcluded(name string) int {
	c := s.compiled()
	if i := c.excludeL.first(name, false); i >= 0 {
		return i
	}
	if bare, ok := strings.CutPrefix(name, "language_model."); ok {
		return c.excludeL.first(bare, false)
	}
	return -1
}

// modeloptInt says whether a ModelOpt config declares an integer algorithm
// (INT4/W4A8 AWQ, SmoothQuant) for the named module: the whole
// checkpoint's, or its MIXED_PRECISION layer's.
func (s *Scheme) modeloptInt(name string) bool {
	if s.Method != "modelopt" {
		return false
	}
	if s.QuantAlgo == "MIXED_PRECISION" {
		l, ok := s.QuantizedLayers[name]
		return ok && modeloptFamily(l.QuantAlgo) == FamilyInt
	}
	return s.Family == FamilyInt
}

// DeclaredFamily is the quantization family the config files declare for a
// module they call quantized (Declared): a MIXED_PRECISION layer's
// quant_algo, the compressed-tensors config groups that target the module,
// else the scheme's own; "" when they name no single family for it.
func (s *Scheme) DeclaredFamily(m *Module) string {
	fam := s.Family
	switch s.Method {
	case "modelopt":
		if s.QuantAlgo == "MIXED_PRECISION" {
			l, ok := s.QuantizedLayers[m.Name]
			if !ok {
				return ""
			}
			fam = modeloptFamily(l.QuantAlgo)
		}
	case "compressed-tensors":
		fam = ""
		if g := s.groupFor(m.Name); g != nil {
			fam = s.groupFamily(g)
		}
	}
	return definite(fam)
}

// groupFamily is the family a compressed-tensors config group declares:
// its format's (else the config's), and its weight arguments', when those
// agree or one of them says nothing; "" when they disagree. naive-quantized
// names no family (it stores integer or float codes alike), nor does an
// 8-bit float group of 32 by its arguments alone (FP8 or MXFP8).
func (s *Scheme) groupFamily(g *ConfigGroup) string {
	f := g.Format
	if f == "" || f == "mixed-precision" {
		f = s.Format
	}
	byFormat := ""
	if f != "naive-quantized" {
		byFormat = definite(ctFamily(f, nil))
	}
	byArgs := ""
	if w := g.Weights; w != nil && !(w.Type == "float" && w.NumBits == 8 && w.GroupSize == 32) {
		byArgs = definite(ctFamily(argsFormat(w), nil))
	}
	switch {
	case byFormat == "":
		return byArgs
	case byArgs == "" || byArgs == byFormat:
		return byFormat
	}
	return ""
}

// definite is a family that names one format, else "".
func definite(fam string) string {
	if fam == FamilyNone || fam == FamilyMixed {
		return ""
	}
	return fam
}

// FormatFamily is the family of a stored format (Module.Format): nvfp4,
// mxfp4, mxfp8, fp8, int for int<bits>; "" for an unquantized one.
func FormatFamily(format string) string {
	switch format {
	case FormatNVFP4:
		return FamilyNVFP4
	case FormatMXFP4:
		return FamilyMXFP4
	case FormatMXFP8:
		return FamilyMXFP8
	case FormatFP8:
		return FamilyFP8
	}
	if len(format) > 3 && format[:3] == "int" {
		return FamilyInt
	}
	return ""
}
