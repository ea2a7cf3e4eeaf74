// Package compare sets two checkpoints side by side from their headers: bytes,
// parameters and bits per weight by anatomy kind (routed experts, shared
// experts, attention, dense MLP, router, embeddings, head, norms, extra
// layers such as DeepSeek's MTP layer, other) and by stored format, the totals
// with and without the extra layers, and the modules whose stored format
// changed (summarised by name pattern when there are many). It is what
// `quantscope diff` prints and what the page's compare view shows.
package compare

import (
	"cmp"
	"slices"
	"strings"

	"github.com/quantscope/quantscope/formats/anatomy"
	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/scheme"
)

// Repo is one side's input: its modules and its decoder layer count.
type Repo struct {
	Source          string
	Commit          string // the commit read ("" for a local folder)
	Modules         []*scheme.Module
	NumHiddenLayers int // from config.json; 0 when unknown (then no layer counts as extra)
}

// FromCheckpoint takes a loaded checkpoint's modules and config.json's
// num_hidden_layers (0 when config.json is absent or unreadable).
func FromCheckpoint(c *checkpoint.Checkpoint) Repo {
	r := Repo{Source: c.Source.Name(), Modules: c.Modules}
	if cs, ok := c.Source.(hub.CommitSource); ok {
		r.Commit = cs.ResolvedCommit()
	}
	if m, err := anatomy.ParseModel(c.Config); err == nil {
		r.NumHiddenLayers = m.NumHiddenLayers
	}
	return r
}

// Side is one repo's totals.
type Side struct {
	Source        string  `json:"source"`
	Commit        string  `json:"commit,omitempty"` // as inspect's
	Bytes         uint64  `json:"bytes"`
	Parameters    uint64  `json:"parameters"`
	BitsPerWeight float64 `json:"bits_per_weight"`
	// The same without the extra layers (an MTP layer past num_hidden_layers),
	// which matter only to a runtime that uses them.
	BytesWithoutExtra         uint64  `json:"bytes_without_extra_layers"`
	ParametersWithoutExtra    uint64  `json:"parameters_without_extra_layers"`
	BitsPerWeightWithoutExtra float64 `json:"bits_per_weight_without_extra_layers"`
}

// Kind is one anatomy kind on both sides; formats map a stored format to
// the bytes (scales included) of the modules stored in it.
type Kind struct {
	Kind        string            `json:"kind"`
	ABytes      uint64            `json:"a_bytes"`
	BBytes      uint64            `json:"b_bytes"`
	AParameters uint64            `json:"a_parameters"`
	BParameters uint64            `json:"b_parameters"`
	AFormats    map[string]uint64 `json:"a_formats"`
	BFormats    map[string]uint64 `json:"b_formats"`
}

// ABitsPerWeight is 8 × bytes / parameters of side A (0 without parameters).
func (k Kind) ABitsPerWeight() float64 { return bpw(k.ABytes, k.AParameters) }

// BBitsPerWeight is the same for side B.
func (k Kind) BBitsPerWeight() float64 { return bpw(k.BBytes, k.BParameters) }

// Absent is the format of a module on the side that does not have it.
const Absent = "absent"

// Change is a module whose stored format differs between the sides, or,
// with Count, a name pattern (layer and expert numbers as *) covering Count
// such modules with the same change.
type Change struct {
	Module  string `json:"module"`
	AFormat string `json:"a_format"`
	BFormat string `json:"b_format"`
	Count   int    `json:"count,omitempty"`
}

// Diff is the comparison.
type Diff struct {
	A       Side     `json:"a"`
	B       Side     `json:"b"`
	Kinds   []Kind   `json:"kinds"`
	Changed []Change `json:"changed"`
}

// MaxListed is how many changed modules are listed one by one; past it they
// are summarised by pattern.
const MaxListed = 64

// New compares a with b.
func New(a, b Repo) *Diff {
	d := &Diff{A: Side{Source: a.Source, Commit: a.Commit}, B: Side{Source: b.Source, Commit: b.Commit}, Kinds: []Kind{}, Changed: []Change{}}
	kinds := map[string]*Kind{}
	kind := func(k string) *Kind {
		if kinds[k] == nil {
			kinds[k] = &Kind{Kind: k, AFormats: map[string]uint64{}, BFormats: map[string]uint64{}}
		}
		return kinds[k]
	}
	formatsA := make(map[string]string, len(a.Modules))
	la, lb := anatomy.NewLocator(a.NumHiddenLayers), anatomy.NewLocator(b.NumHiddenLayers)
	for _, m := range a.Modules {
		p := la.Locate(m.Name)
		k := kind(p.Kind)
		k.ABytes += m.Bytes
		k.AParameters += m.Parameters
		m.AddBytesByFormat(k.AFormats)
		d.A.add(m, p.Extra)
		formatsA[m.Name] = m.Format
	}
	var changed []Change
	inB := make(map[string]bool, len(b.Modules))
	for _, m := range b.Modules {
		p := lb.Locate(m.Name)
		k := kind(p.Kind)
		k.BBytes += m.Bytes
		k.BParameters += m.Parameters
		m.AddBytesByFormat(k.BFormats)
		d.B.add(m, p.Extra)
		inB[m.Name] = true
		fa, ok := formatsA[m.Name]
		if !ok {
			fa = Absent
		}
		if fa != m.Format {
			changed = append(changed, Change{Module: m.Name, AFormat: fa, BFormat: m.Format})
		}
	}
	for _, m := range a.Modules {
		if !inB[m.Name] {
			changed = append(changed, Change{Module: m.Name, AFormat: m.Format, BFormat: Absent})
		}
	}
	d.A.finish()
	d.B.finish()
	for _, k := range anatomy.Kinds {
		if kinds[k] != nil {
			d.Kinds = append(d.Kinds, *kinds[k])
		}
	}
	slices.SortFunc(changed, func(x, y Change) int { return cmp.Compare(x.Module, y.Module) })
	if len(changed) <= MaxListed {
		d.Changed = append(d.Changed, changed...)
	} else {
		d.Changed = summarise(changed)
	}
	return d
}

func (s *Side) add(m *scheme.Module, extra bool) {
	s.Bytes += m.Bytes
	s.Parameters += m.Parameters
	if !extra {
		s.BytesWithoutExtra += m.Bytes
		s.ParametersWithoutExtra += m.Parameters
	}
}

func (s *Side) finish() {
	s.BitsPerWeight = bpw(s.Bytes, s.Parameters)
	s.BitsPerWeightWithoutExtra = bpw(s.BytesWithoutExtra, s.ParametersWithoutExtra)
}

func bpw(bytes, params uint64) float64 {
	if params == 0 {
		return 0
	}
	return 8 * float64(bytes) / float64(params)
}

// Pattern replaces every all-digit dotted part of a module name (layer and
// expert numbers) with *.
func Pattern(name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		if p != "" && strings.Trim(p, "0123456789") == "" {
			parts[i] = "*"
		}
	}
	return strings.Join(parts, ".")
}

// summarise groups changes by (pattern, a format, b format), largest groups
// first; a group of one keeps its module's own name and no count. A group's
// name keeps the numbers its members share (the MTP layer's experts are
// model.layers.61.mlp.experts.*.down_proj, not a * for the layer too).
func summarise(changed []Change) []Change {
	type key struct{ pattern, a, b string }
	type group struct {
		Change
		parts []string // the first member's parts, "*" where members differ
	}
	groups := map[key]*group{}
	var order []key
	for _, c := range changed {
		k := key{Pattern(c.Module), c.AFormat, c.BFormat}
		g := groups[k]
		if g == nil {
			g = &group{Change: Change{Module: c.Module, AFormat: c.AFormat, BFormat: c.BFormat}, parts: strings.Split(c.Module, ".")}
			groups[k] = g
			order = append(order, k)
		} else {
			for i, p := range strings.Split(c.Module, ".") { // same pattern: same number of parts
				if g.parts[i] != p {
					g.parts[i] = "*"
				}
			}
		}
		g.Count++
	}
	out := make([]Change, 0, len(order))
	for _, k := range order {
		g := groups[k]
		if g.Count > 1 {
			g.Module = strings.Join(g.parts, ".")
		} else {
			g.Count = 0
		}
		out = append(out, g.Change)
	}
	slices.SortStableFunc(out, func(x, y Change) int { return cmp.Compare(max(y.Count, 1), max(x.Count, 1)) })
	return out
}
