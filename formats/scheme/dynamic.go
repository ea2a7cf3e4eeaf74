package scheme

// GPT-QModel's per-module overrides: quantization_config.dynamic.

import (
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/dlclark/regexp2"
)

// DynamicRule is one entry of GPT-QModel's quantization_config.dynamic, an
// object of pattern → overrides read in file order. The first rule whose
// pattern matches a module's name at its start (Python's re.match) decides:
// "-:PATTERN" leaves the module unquantized; "+:PATTERN" or a bare PATTERN
// quantizes it with the base config changed by the overrides
// (gptqmodel/quantization/config.py `dynamic_get`; vLLM's
// gptq_utils.get_dynamic_override reads it the same way). Only the
// overrides that change how the stored bytes read are kept; GPT-QModel's
// others (damp_percent, mse, adapters) are calibration settings.
type DynamicRule struct {
	Pattern   string `json:"pattern"`        // as written, with its prefix
	Skip      bool   `json:"skip,omitempty"` // "-:": matching modules are not quantized
	Bits      int    `json:"bits,omitempty"`
	GroupSize int    `json:"group_size,omitempty"`
	Symmetric *bool  `json:"sym,omitempty"`
	DescAct   *bool  `json:"desc_act,omitempty"`

	match func(string) bool
}

// GPTQParams is the config GPT-QModel quantized one module with: the base
// quantization_config with the overrides of the first dynamic rule that
// matches it.
type GPTQParams struct {
	Bits, GroupSize int
	Symmetric       *bool
	DescAct         bool
	// Skip: a "-:" rule left the module unquantized.
	Skip bool
	// Rule is the pattern of the rule that matched ("" for none).
	Rule string
}

// GPTQFor is the config the module named name was quantized with.
func (s *Scheme) GPTQFor(name string) GPTQParams {
	p := GPTQParams{Bits: s.Bits, GroupSize: s.GroupSize, Symmetric: s.Symmetric, DescAct: s.DescAct}
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
		o := &obj{m: ov, file: qc.file, path: field + "."}
		r.Bits = o.integer("bits")
		r.GroupSize = o.integer("group_size")
		if b, ok := o.boolean("sym"); ok {
			r.Symmetric = &b
		}
		if b, ok := o.boolean("desc_act"); ok {
			r.DescAct = &b
		}
		if o.err != nil {
			return o.err
		}
		if r.Bits != 0 && !validBits(s, r.Bits) {
			return fail("bits %d cannot be stored as checkpoint_format %s", r.Bits, s.CheckpointFormat)
		}
		if r.GroupSize < -1 {
			return fail("group_size %d (want -1 for one group a column, or a positive size)", r.GroupSize)
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
