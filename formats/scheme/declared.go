package scheme

import "github.com/quantscope/quantscope/formats/packing"

const ctPerWord = packing.CTPerWord

func ctLayoutOf(s *Scheme) packing.CTLayout { return packing.CTLayoutForVersion(s.Version) }

// groupFor is the compressed-tensors config group that targets a module.
func (s *Scheme) groupFor(name string) *ConfigGroup {
	c := s.compiled()
	if c.ignoreL.first(name, false) >= 0 {
		return nil
	}
	for i, g := range c.groupL {
		if g.first(name, true) >= 0 {
			return &s.Groups[i]
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
		if s.compiled().excludeL.first(m.Name, false) >= 0 {
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

// isLinearLike: a module with a matrix weight that is not an embedding or norm.
func isLinearLike(m *Module) bool {
	if m.Kind == "embedding" || m.Kind == "norm" || m.Format == FormatNone {
		return false
	}
	return len(m.WeightShape) >= 2
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
		if i := c.excludeL.first(name, false); i >= 0 {
			return s.ExcludeModules[i]
		}
		return ""
	}
	if i := c.ignoreL.first(name, false); i >= 0 {
		return s.Ignore[i]
	}
	return ""
}

// DeclaredFamily is the quantization family the config files declare for a
// module they call quantized (Declared): a MIXED_PRECISION layer's
// quant_algo, the compressed-tensors config group that targets the module,
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
		if g := s.groupFor(m.Name); g != nil {
			f := g.Format
			if f == "" || f == "mixed-precision" {
				f = argsFormat(g.Weights)
			}
			if gf := ctFamily(f, nil); gf != FamilyNone && gf != FamilyMixed {
				fam = gf
			}
		}
	}
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
