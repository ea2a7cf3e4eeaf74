package scheme

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// NameGroup is module names or patterns that differ only in one numeric
// path segment (the layer number): "model.layers.N.self_attn*" standing for
// 61 entries, N in 0–60.
type NameGroup struct {
	Pattern string `json:"pattern"`          // the entry with its layer segment written N
	Count   int    `json:"count"`            // entries it stands for
	Layers  string `json:"layers,omitempty"` // the numbers as ranges, "0–2, 5, 7–60"; empty for a lone entry
}

// GroupNames summarises a list of module names or patterns (an
// exclude_modules or ignore list) by the first path segment that is a whole
// number, keeping the order of first appearance. Entries with no such
// segment stand alone.
func GroupNames(names []string) []NameGroup {
	type acc struct {
		pattern string
		at      int // the segment that held the number
		nums    []int
	}
	var order []*acc
	byKey := map[string]*acc{}
	for _, n := range names {
		pattern, at, num := numberSegment(n)
		// The segment's index is part of the key: "x.1.N" and "x.N.1" both
		// read "x.N.N" but are different groups. A lone entry (at < 0)
		// never merges with a pattern.
		key := strconv.Itoa(at) + "\x00" + pattern
		a := byKey[key]
		if a == nil {
			a = &acc{pattern: pattern, at: at}
			byKey[key] = a
			order = append(order, a)
		}
		a.nums = append(a.nums, num) // −1 for a lone entry
	}
	out := make([]NameGroup, 0, len(order))
	for _, a := range order {
		g := NameGroup{Pattern: a.pattern, Count: len(a.nums)}
		if a.nums[0] >= 0 {
			if len(a.nums) == 1 { // one layer: say it as written
				g.Pattern = restore(a.pattern, a.at, a.nums[0])
			} else {
				g.Layers = ranges(a.nums)
			}
		}
		out = append(out, g)
	}
	return out
}

// numberSegment finds the first path segment of name that is a whole
// number: it returns name with that segment written N, the segment's index
// and the number, or name, −1, −1 when there is none.
func numberSegment(name string) (pattern string, at, num int) {
	segs := strings.Split(name, ".")
	for i, s := range segs {
		if v, err := strconv.Atoi(s); err == nil && v >= 0 && s == strconv.Itoa(v) {
			segs[i] = "N"
			return strings.Join(segs, "."), i, v
		}
	}
	return name, -1, -1
}

// restore puts a number back in segment at of a pattern (which may hold
// other, literal, N segments).
func restore(pattern string, at, n int) string {
	segs := strings.Split(pattern, ".")
	if at >= 0 && at < len(segs) {
		segs[at] = strconv.Itoa(n)
	}
	return strings.Join(segs, ".")
}

// ranges writes numbers as sorted, deduplicated ranges: "0–2, 5, 7–60".
func ranges(nums []int) string {
	s := slices.Clone(nums)
	slices.Sort(s)
	s = slices.Compact(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d–%d", s[i], s[j]))
		} else {
			parts = append(parts, strconv.Itoa(s[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// String is the group as a person reads it.
func (g NameGroup) String() string {
	if g.Layers == "" {
		return g.Pattern
	}
	return fmt.Sprintf("%s (N in %s: %d)", g.Pattern, g.Layers, g.Count)
}

// MarshalJSON adds to the scheme's fields the grouped forms of its
// exclusion lists (exclude_summary, ignore_summary), which the page shows
// instead of hundreds of entries.
func (s *Scheme) MarshalJSON() ([]byte, error) {
	type plain Scheme
	v := struct {
		*plain
		ExcludeSummary []NameGroup `json:"exclude_summary,omitempty"`
		IgnoreSummary  []NameGroup `json:"ignore_summary,omitempty"`
	}{plain: (*plain)(s)}
	if len(s.ExcludeModules) > 0 {
		v.ExcludeSummary = GroupNames(s.ExcludeModules)
	}
	if len(s.Ignore) > 0 {
		v.IgnoreSummary = GroupNames(s.Ignore)
	}
	return json.Marshal(v)
}
