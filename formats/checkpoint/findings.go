package checkpoint

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
)

// Rules of the repo as a whole (the per-module rules live in scheme).
const (
	RuleExcludedButQuantized = "config-excludes-quantized"  // an exclude/ignore list calls a quantized module unquantized
	RuleDeclaredButDense     = "config-quantized-but-dense" // the config says quantized, the bytes are not
	RuleDeclaredOtherFormat  = "config-format-differs"      // the config declares one quantized format, the bytes hold another
	RuleIndexTotalSize       = "index-total-size"
	RuleIndexMissingTensor   = "index-missing-tensor"  // weight_map names a tensor its shard does not hold
	RuleIndexWrongShard      = "index-wrong-shard"     // the tensor is in another shard than weight_map says
	RuleIndexUnlistedTensor  = "index-unlisted-tensor" // a shard holds a tensor weight_map does not name
	RuleIndexUnlistedShard   = "index-unlisted-shard"  // a .safetensors file weight_map never names
	RuleScale2Inconsistent   = "scale2-inconsistent"   // weight_scale_2 dtypes or shapes differ across modules
	RuleLabelVsBytes         = "label-vs-bytes"        // an FP4/FP8 label on a checkpoint whose bytes are mostly 16-bit
	RuleNothingQuantized     = "label-nothing-quantized"
	RuleSiblingConfig        = "sibling-config"        // one file's neighbouring config.json could not be read: the file is read alone
	RuleShardUnreadable      = "shard-unreadable"      // with Options.KeepGoing: a shard that could not be read
	RuleSubfolderShard       = "subfolder-shard"       // without an index: a .safetensors file below the repo's top, not read
	RuleConfigFilesDisagree  = "config-files-disagree" // hf_quant_config.json and config.json's quantization_config differ
)

func (c *Checkpoint) checkRepo(ctx context.Context) []scheme.Finding {
	var out []scheme.Finding
	s := c.Scheme
	// Two config files that say different things: runtimes differ in which
	// they read (vLLM config.json's quantization_config first, TensorRT-LLM
	// hf_quant_config.json), so the repo runs differently in each.
	for _, d := range s.Conflicts {
		out = append(out, scheme.Finding{Rule: RuleConfigFilesDisagree, Severity: scheme.SeverityWarning,
			Message: d + "; this inventory reads config.json's, as vLLM does, while TensorRT-LLM reads hf_quant_config.json"})
	}
	// What the config files say of each module against what is stored.
	for _, m := range c.Modules {
		declared, known := s.Declared(m)
		switch {
		case declared && m.Quantized:
			// A runtime builds the layer the config declares and reads
			// these bytes as that format's codes and scales. (Methods that
			// list only exclusions build every other linear so: known or
			// not, a module declared quantized is built as declared.)
			if want, got := declaredVersusStored(s, m); want != got {
				out = append(out, scheme.Finding{Rule: RuleDeclaredOtherFormat, Severity: scheme.SeverityError, Module: m.Name, Tensor: m.Primary(),
					Message: fmt.Sprintf("%s declares %s for this module, but its weight is stored %s (%s layout): a runtime that follows %[1]s reads these bytes as the wrong format",
						strings.Join(s.DeclaredIn, " and "), want, got, m.Layout)})
			}
		case !known:
		case !declared && m.Quantized:
			why := "the config lists it as not quantized"
			if pat := s.ExcludedBy(m.Name); pat != "" {
				why = fmt.Sprintf("%s entry %q calls it unquantized", excludeField(s), pat)
			}
			out = append(out, scheme.Finding{Rule: RuleExcludedButQuantized, Severity: scheme.SeverityError, Module: m.Name, Tensor: m.Primary(),
				Message: fmt.Sprintf("%s, but its weight is stored %s", why, m.Format)})
		case declared && !m.Quantized && m.Layout == scheme.LayoutUnquantized:
			out = append(out, scheme.Finding{Rule: RuleDeclaredButDense, Severity: scheme.SeverityWarning, Module: m.Name, Tensor: m.Primary(),
				Message: fmt.Sprintf("the %s config quantizes this module, but its weight is stored %s", s.Method, m.Format)})
		}
	}
	out = append(out, c.checkIndex(ctx)...)
	out = append(out, c.checkScale2()...)
	out = append(out, c.checkLabel()...)
	return out
}

// declaredVersusStored names the quantized format the config declares for
// a module and the one its weight is stored in, alike when they agree or
// when either is not known: the family (nvfp4, fp8, mxfp4, mxfp8, int), and
// for FP8 under a config that names its variant (fmt, quantscope.format)
// the variant of the weight's dtype too. MXFP8 bytes under an FP8 label
// pass (compressed-tensors has described MX groups as float-quantized),
// while FP8 bytes under an MXFP8 label do not; nor is a U8 weight held to
// NVFP4 without E4M3 block scales (the scale rules report that).
func declaredVersusStored(s *scheme.Scheme, m *scheme.Module) (declared, stored string) {
	want, got := s.DeclaredFamily(m), scheme.FormatFamily(m.Format)
	if want == "" || got == "" {
		return "", ""
	}
	if want == scheme.FamilyFP8 && got == scheme.FamilyMXFP8 {
		return "", ""
	}
	if got == scheme.FamilyNVFP4 {
		if sc, ok := m.Info("weight_scale"); !ok || sc.DType != safetensors.F8_E4M3 {
			return "", ""
		}
	}
	if want != got {
		return want, m.Format
	}
	if want == scheme.FamilyFP8 && s.FP8Format != "" {
		if w, ok := m.Info("weight"); ok {
			if v := scheme.NormalizeFP8Format(w.DType.String()); v != "" && v != s.FP8Format {
				return "fp8 " + s.FP8Format, "fp8 " + v + " (" + w.DType.String() + ")"
			}
		}
	}
	return want, want
}

func excludeField(s *scheme.Scheme) string {
	if s.Method == "modelopt" {
		return "exclude_modules"
	}
	if s.Method == "compressed-tensors" {
		return "ignore"
	}
	return "modules_to_not_convert"
}

func indexShard(x *Index, name string) string {
	p, _ := x.Shard(name)
	return p
}

func (c *Checkpoint) checkIndex(ctx context.Context) []scheme.Finding {
	if c.Index == nil {
		var out []scheme.Finding
		for _, p := range c.setAside {
			out = append(out, scheme.Finding{Rule: RuleSubfolderShard, Severity: scheme.SeverityInfo,
				Message: fmt.Sprintf("%s is in a subfolder of a repo without an index: loaders read the .safetensors files at the top, and so does this inventory", p)})
		}
		return out
	}
	var out []scheme.Finding
	for _, f := range c.Files {
		if strings.HasSuffix(f.Path, ".safetensors") && !c.indexShards[f.Path] {
			out = append(out, scheme.Finding{Rule: RuleIndexUnlistedShard, Severity: scheme.SeverityWarning,
				Message: fmt.Sprintf("%s is in the repo but the index names none of its tensors: loaders that follow the index ignore it, and so does this inventory", f.Path)})
		}
	}
	var data uint64
	for _, sh := range c.Shards {
		data += sh.Header.DataLen()
	}
	if c.Index.TotalSize != nil && *c.Index.TotalSize != data {
		out = append(out, scheme.Finding{Rule: RuleIndexTotalSize, Severity: scheme.SeverityWarning,
			Message: fmt.Sprintf("%s metadata.total_size is %d, the shards' headers hold %d bytes of tensor data (%.2f×)", indexFile, *c.Index.TotalSize, data, float64(*c.Index.TotalSize)/float64(max(data, 1)))})
	}
	listed := 0
	for i := range c.tensors {
		t, loc := &c.tensors[i], c.locs[i]
		switch c.listed[i] {
		case unlisted:
			out = append(out, scheme.Finding{Rule: RuleIndexUnlistedTensor, Severity: scheme.SeverityWarning, Tensor: t.Name,
				Message: fmt.Sprintf("stored in %s but absent from the index's weight_map: loaders that follow the index will not find it", loc.shard.Path)})
		case listedWrong:
			listed++
			out = append(out, scheme.Finding{Rule: RuleIndexWrongShard, Severity: scheme.SeverityError, Tensor: t.Name,
				Message: fmt.Sprintf("weight_map puts the tensor in %s, but it is stored in %s", indexShard(c.Index, t.Name), loc.shard.Path)})
		default:
			listed++
		}
	}
	if listed < c.Index.Len() { // some names no shard holds (sorted with the rest at the end)
		out = append(out, c.missingTensors(ctx, c.Index.Len()-listed)...)
	}
	return out
}

// missingTensors names the weight_map entries no shard holds. The Index
// keeps no names, so the file is read again: a second request, made only
// for a repo that has such entries.
func (c *Checkpoint) missingTensors(ctx context.Context, n int) []scheme.Finding {
	var out []scheme.Finding
	b, err := c.Source.ReadFile(ctx, indexFile, maxJSONFile)
	if err == nil {
		_, err = parseIndexEach(b, func(name, file string) {
			if c.shardByPath[file] == nil {
				return // a shard that could not be read: its own finding says so
			}
			if _, ok := c.lookup(name); !ok {
				out = append(out, scheme.Finding{Rule: RuleIndexMissingTensor, Severity: scheme.SeverityError, Tensor: name,
					Message: fmt.Sprintf("weight_map puts the tensor in %s, but no shard holds it", file)})
			}
		})
	}
	if err != nil { // the file changed or went away since it was first read
		out = append(out[:0], scheme.Finding{Rule: RuleIndexMissingTensor, Severity: scheme.SeverityError,
			Message: fmt.Sprintf("weight_map names %d tensor(s) that no shard holds (or that a shard which could not be read holds); reading %s again to name them failed: %v", n, indexFile, err)})
	}
	return out
}

// checkScale2 flags weight_scale_2 tensors whose dtype or shape differs from
// the most common one: a loader that reads them all alike misreads the rest.
func (c *Checkpoint) checkScale2() []scheme.Finding {
	type kind struct {
		dtype safetensors.DType
		shape string
	}
	shapeKey := func(s []uint64) string { // scale shapes are [], [1] or the like
		if len(s) == 0 {
			return "[]"
		}
		if len(s) == 1 && s[0] == 1 {
			return "[1]"
		}
		return fmt.Sprint(s)
	}
	count := map[kind]int{}
	var infos []*scheme.TensorInfo
	for _, m := range c.Modules {
		if t, ok := m.Info("weight_scale_2"); ok {
			infos = append(infos, t)
			count[kind{t.DType, shapeKey(t.Shape)}]++
		}
	}
	if len(count) < 2 {
		return nil
	}
	var common kind
	for k, n := range count {
		if n > count[common] || (n == count[common] && k.shape < common.shape) {
			common = k
		}
	}
	var out []scheme.Finding
	for _, t := range infos {
		k := kind{t.DType, shapeKey(t.Shape)}
		if k != common {
			out = append(out, scheme.Finding{Rule: RuleScale2Inconsistent, Severity: scheme.SeverityWarning, Tensor: t.Name,
				Message: fmt.Sprintf("weight_scale_2 is %s %s here but %s %s in %d other modules", t.DType, k.shape, common.dtype, common.shape, count[common])})
		}
	}
	return out
}

// checkLabel compares the declared family with where the bytes are.
func (c *Checkpoint) checkLabel() []scheme.Finding {
	s := c.Scheme
	if s.Family == scheme.FamilyNone {
		return nil
	}
	// Only the modules the config calls quantized count: embeddings, norms,
	// a vision tower or a head left in 16 bits on purpose are no sign of a
	// wrong label (a small tied model's embedding alone can be half its
	// bytes).
	var total, wide, quant uint64
	nq := 0
	for _, m := range c.Modules {
		if m.Quantized {
			nq++
		}
		if q, _ := s.Declared(m); !q {
			continue
		}
		total += m.Bytes
		if m.Quantized {
			quant += m.Bytes
		} else if w, ok := m.Info("weight"); ok && (w.DType == safetensors.BF16 || w.DType == safetensors.F16 || w.DType == safetensors.F32) {
			wide += m.Bytes
		}
	}
	var out []scheme.Finding
	if one, ok := c.Source.(hub.OneFile); nq == 0 && ok && one.OneFile() {
		return nil // one shard of a repo may hold only its head and norms
	}
	if nq == 0 {
		out = append(out, scheme.Finding{Rule: RuleNothingQuantized, Severity: scheme.SeverityError,
			Message: fmt.Sprintf("%s declares %s quantization (%s), but no module's weight is stored quantized", strings.Join(s.DeclaredIn, " and "), s.Family, s.Method)})
		return out
	}
	low := s.Family == scheme.FamilyNVFP4 || s.Family == scheme.FamilyMXFP4 || s.Family == scheme.FamilyFP8 || s.Family == scheme.FamilyInt
	if low && total > 0 && wide*2 > total {
		out = append(out, scheme.Finding{Rule: RuleLabelVsBytes, Severity: scheme.SeverityWarning,
			Message: fmt.Sprintf("declared %s, but %.0f%% of the bytes of the modules it calls quantized are 16/32-bit floats (%d of %d); quantized modules hold %.0f%%",
				s.Family, 100*float64(wide)/float64(total), wide, total, 100*float64(quant)/float64(total))})
	}
	return out
}

var severityRank = map[string]int{scheme.SeverityError: 0, scheme.SeverityWarning: 1, scheme.SeverityInfo: 2}

func sortFindings(f []scheme.Finding) {
	slices.SortStableFunc(f, func(a, b scheme.Finding) int {
		if d := severityRank[a.Severity] - severityRank[b.Severity]; d != 0 {
			return d
		}
		if c := strings.Compare(a.Rule, b.Rule); c != 0 {
			return c
		}
		return strings.Compare(a.Tensor, b.Tensor)
	})
}
