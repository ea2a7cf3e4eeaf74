package scheme

// GPT-QModel's per-module overrides: quantization_config.dynamic.

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/dlclark/regexp2"
)

// DynamicRule is one entry of GPT-QModel's quantization_config.dynamic, an
// object of pattern → overrides. The rules are tried with every "-" rule
// first, then the others, each group in file order, as GPT-QModel orders
// them before it quantizes or loads (gptqmodel/quantization/config.py:
// `self.dynamic = {**{k: v ... if k.startswith('-')}, **{...}}`), and the
// first whose pattern matches a module's name at its start (Python's
// re.match) decides: "-:PATTERN" leaves the module unquantized; "+:PATTERN"
// or a bare PATTERN quantizes it with the base config changed by the
// overrides (`dynamic_get`). The configs GPT-QModel writes are already in
// that order; vLLM (gptq_utils.get_dynamic_override) tries the rules in
// file order, which differs only for a hand-edited file with a "-" rule
// after a "+" rule that also matches. Of the overrides, the ones that
// change how the stored bytes read are kept (bits, group_size, sym,
// desc_act; weight_block_size for FP8); those that would change the
// packing itself (format, pack_dtype, checkpoint_format) are refused unless
// they repeat the base config's; the others (damp_percent, mse, adapters)
// are calibration settings.
type DynamicRule struct {
	Pattern   string `json:"pattern"`        // as written, with its prefix
	Skip      bool   `json:"skip,omitempty"` // "-:": matching modules are not quantized
	Bits      int    `json:"bits,omitempty"`
	GroupSize int    `json:"group_size,omitempty"`
	Symmetric *bool  `json:"sym,omitempty"`
	DescAct   *bool  `json:"desc_act,omitempty"`
	// WeightBlockSize is an FP8 module's own block (GPT-QModel's FP8
	// export).
	WeightBlockSize []int `json:"weight_block_size,omitempty"`

	match func(string) bool
}

// DynamicParams is the config GPT-QModel quantized one module with: the base
// quantization_config with the overrides of the first dynamic rule that
// matches it (the base alone for a config without dynamic).
type DynamicParams struct {
	Bits, GroupSize int
	Symmetric       *bool
	DescAct         bool
	WeightBlockSize []int
	// Skip: a "-:" rule left the module unquantized.
	Skip bool
	// Rule is the pattern of the rule that matched ("" for none).
	Rule string
}

// DynamicFor is the config the module named name was quantized with.
func (s *Scheme) DynamicFor(name string) DynamicParams {
	p := DynamicParams{Bits: s.Bits, GroupSize: s.GroupSize, Symmetric: s.Symmetric, DescAct: s.DescAct, WeightBlockSize: s.WeightBlockSize}
	for i := range s.Dynamic {
		r := &s.Dynamic[i]
		if r.match == nil || !r.match(name) {
			continue
		}
		p.Rule, p.Skip = r.Pattern, r.Skip
		if r.Bits != 0 {
			p.Bits = r.Bits
		}
		if r.GroupSize != 0 {
			p.GroupSize = r.GroupSize
		}
		if r.Symmetric != nil {
			p.Symmetric = r.Symmetric
		}
		if r.DescAct != nil {
			p.DescAct = *r.DescAct
		}
		if r.WeightBlockSize != nil {
			p.WeightBlockSize = r.WeightBlockSize
		}
		break
	}
	return p
}

// dynamicMatchTimeout bounds one backtracking match (a pattern RE2 cannot
// run, such as a lookahead): a pathological pattern fails to match rather
// than hang the inventory.
const dynamicMatchTimeout = 100 * time.Millisecond

// compileDynamic compiles a rule's pattern (its "+:" / "-:" prefix cut) to
// match at the start of a name. RE2 first; a pattern that uses what only a
// backtracking engine has (GPT-QModel compiles with PCRE: lookarounds,
// backreferences) goes to regexp2.
func compileDynamic(p string) (func(string) bool, error) {
	if re, err := regexp.Compile(`^(?:` + p + `)`); err == nil {
		return re.MatchString, nil
	}
	if _, err := regexp2.Compile(p, regexp2.None); err != nil {
		return nil, err // the error quotes the pattern as written
	}
	re, err := regexp2.Compile(`\A(?:`+p+`)`, regexp2.None)
	if err != nil {
		return nil, err
	}
	re.MatchTimeout = dynamicMatchTimeout
	return func(name string) bool {
		ok, err := re.MatchString(name)
		return ok && err == nil
	}, nil
}

// readDynamic reads quantization_config.dynamic in the order of keys (the
// file's order, from the raw config), checking each override as the base
// config's field is checked. A pattern that compiles in neither engine is
// refused, as GPT-QModel refuses it when it loads the config.
func (s *Scheme) readDynamic(qc *obj, keys []string) error {
	v, ok := qc.m["dynamic"]
	if !ok || v == nil {
		return nil
	}
	d, ok := v.(map[string]any)
	if !ok {
		return &ConfigError{File: qc.file, Field: qc.path + "dynamic", Msg: "want an object of pattern → overrides, found " + jsonKind(v)}
	}
	// A key written twice is one pattern, where Python's dict keeps it: at
	// its first place, with the last value (the decoded map's).
	seen := make(map[string]bool, len(keys))
	keys = slices.DeleteFunc(slices.Clone(keys), func(k string) bool {
		dup := seen[k]
		seen[k] = true
		return dup
	})
	if len(keys) != len(d) { // the raw order unreadable: a decoded map has none
		return &ConfigError{File: qc.file, Field: qc.path + "dynamic", Msg: "its patterns could not be read in file order, which decides which one applies"}
	}
	// GPT-QModel's order: the "-" rules first.
	negative := func(k string) bool { return strings.HasPrefix(k, "-") }
	keys = append(slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return !negative(k) }),
		slices.DeleteFunc(keys, negative)...)
	for _, pat := range keys {
		field := fmt.Sprintf("%sdynamic[%q]", qc.path, pat)
		fail := func(f string, a ...any) error {
			return &ConfigError{File: qc.file, Field: field, Msg: fmt.Sprintf(f, a...)}
		}
		ov, ok := d[pat].(map[string]any)
		if !ok && d[pat] != nil {
			return fail("want an object of overrides, found %s", jsonKind(d[pat]))
		}
		r := DynamicRule{Pattern: pat}
		raw := pat
		if len(pat) >= 2 && (pat[:2] == "-:" || pat[:2] == "+:") {
			r.Skip, raw = pat[0] == '-', pat[2:]
		}
		m, err := compileDynamic(raw)
		if err != nil {
			return fail("the pattern is no regular expression: %v", err)
		}
		r.match = m
		if r.Skip { // the module is left as it was: its overrides say nothing
			s.Dynamic = append(s.Dynamic, r)
			continue
		}
		o := &obj{m: ov, file: qc.file, path: field + "."}
		_, hasGroup := ov["group_size"]
		r.Bits = o.integer("bits")
		r.GroupSize = o.integer("group_size")
		if b, ok := o.boolean("sym"); ok {
			r.Symmetric = &b
		}
		if b, ok := o.boolean("desc_act"); ok {
			r.DescAct = &b
		}
		r.WeightBlockSize = o.ints("weight_block_size")
		// Overrides that change the packing itself: only the base's own.
		for _, k := range []struct{ key, base string }{{"format", s.Format}, {"checkpoint_format", s.CheckpointFormat}, {"pack_dtype", "int32"}} {
			if s.Method == "fp8" && k.key == "format" {
				continue // an FP8 module's fmt: its weight's dtype says it
			}
			if s.Method == "gptq" && k.key == "format" {
				k.base = s.CheckpointFormat
			}
			if v := o.str(k.key); v != "" && !strings.EqualFold(v, k.base) {
				return fail("%s %q differs from the base config's (%q): a module packed otherwise is not read", k.key, v, k.base)
			}
		}
		if _, ok := ov["weight_scale_semantics"]; ok && s.Method == "fp8" {
			return fail("a module's own weight_scale_semantics (whether its scales divide or multiply) is not read")
		}
		if o.err != nil {
			return o.err
		}
		switch {
		case s.Method == "awq" && r.Bits != 0 && r.Bits != 4:
			return fail("bits %d: AWQ packs 4 bits only", r.Bits)
		case s.Method == "gptq" && r.Bits != 0 && !validBits(s, r.Bits):
			return fail("bits %d cannot be stored as checkpoint_format %s", r.Bits, s.CheckpointFormat)
		case s.Method == "fp8" && (r.Bits != 0 && r.Bits != 8):
			return fail("bits %d in an FP8 config", r.Bits)
		case hasGroup && (r.GroupSize == 0 || r.GroupSize < -1):
			return fail("group_size %d (want -1 for one group a column, or a positive size)", r.GroupSize)
		case r.WeightBlockSize != nil && (len(r.WeightBlockSize) != 2 || r.WeightBlockSize[0] <= 0 || r.WeightBlockSize[1] <= 0 || r.WeightBlockSize[0] > maxBlock || r.WeightBlockSize[1] > maxBlock):
			return fail("weight_block_size %v (want two positive integers)", r.WeightBlockSize)
		}
		s.Dynamic = append(s.Dynamic, r)
	}
	return nil
}

// validBits: the bit widths a GPTQ or AWQ checkpoint of s's format stores
// (gptq_p packs 2..8 bits; the word layouts 2, 3, 4 and 8).
func validBits(s *Scheme, bits int) bool {
	if s.CheckpointFormat == "gptq_p" {
		return bits >= 2 && bits <= 8
	}
	return bits == 2 || bits == 3 || bits == 4 || bits == 8
}
