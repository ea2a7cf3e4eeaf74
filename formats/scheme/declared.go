package scheme

import (
	"path"
	"regexp"
	"strings"
	"sync"

	"github.com/quantscope/quantscope/formats/packing"
)

const ctPerWord = packing.CTPerWord

func ctLayoutOf(s *Scheme) packing.CTLayout { return packing.CTLayoutForVersion(s.Version) }

var reCache sync.Map // pattern → *regexp.Regexp (nil when invalid)

// matchTarget applies one compressed-tensors target or ignore entry to a module
// name: "re:" patterns are regular expressions searched in the name, a bare
// class name (Linear, Embedding, ...) matches every module of that kind we can
// recognise by its tensors, anything else is a module name or name suffix.
func matchTarget(target, name string, linear bool) bool {
	if p, ok := strings.CutPrefix(target, "re:"); ok {
		v, ok := reCache.Load(p)
		if !ok {
			re, err := regexp.Compile(p)
			if err != nil {
				re = nil
			}
			v, _ = reCache.LoadOrStore(p, re)
		}
		re, _ := v.(*regexp.Regexp)
		return re != nil && re.MatchString(name)
	}
	switch target {
	case "Linear", "QuantLinear", "nn.Linear":
		return linear
	}
	return name == target || strings.HasSuffix(name, "."+target)
}

// groupFor is the compressed-tensors config group that targets a module.
func (s *Scheme) groupFor(name string) *ConfigGroup {
	if s.ignored(name) {
		return nil
	}
	for i := range s.Groups {
		for _, t := range s.Groups[i].Targets {
			if matchTarget(t, name, true) {
				return &s.Groups[i]
			}
		}
	}
	return nil
}

func (s *Scheme) ignored(name string) bool {
	for _, ig := range s.Ignore {
		if matchTarget(ig, name, false) {
			return true
		}
	}
	return false
}

// fnmatch is Python's fnmatch as ModelOpt uses it: '*' also crosses dots.
func fnmatch(pattern, name string) bool {
	// path.Match's '*' stops at '/', which module names never contain.
	ok, err := path.Match(pattern, name)
	return err == nil && ok
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
		for _, ex := range s.ExcludeModules {
			if fnmatch(ex, m.Name) {
				return false, true
			}
		}
		return linear, linear
	case "compressed-tensors":
		if s.ignored(m.Name) {
			return false, true
		}
		for i := range s.Groups {
			for _, t := range s.Groups[i].Targets {
				if matchTarget(t, m.Name, linear) {
					return true, true
				}
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
// entry that names a module, or "" when none does.
func (s *Scheme) ExcludedBy(name string) string {
	if s.Method == "modelopt" {
		for _, ex := range s.ExcludeModules {
			if fnmatch(ex, name) {
				return ex
			}
		}
		return ""
	}
	for _, ig := range s.Ignore {
		if s.Method == "compressed-tensors" {
			if matchTarget(ig, name, false) {
				return ig
			}
		} else if ignoreMatches(ig, name) {
			return ig
		}
	}
	return ""
}

// ignoreMatches is modules_to_not_convert: a module name, a dotted prefix or
// suffix of one, or an fnmatch wildcard.
func ignoreMatches(ig, name string) bool {
	return name == ig || strings.HasSuffix(name, "."+ig) || strings.HasPrefix(name, ig+".") || (strings.ContainsAny(ig, "*?[") && (fnmatch(ig, name) || fnmatch(ig+".*", name)))
}
