package ops

import (
	"fmt"
	"slices"
	"strings"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/scheme"
)

// FindModule looks up the module an operation on a module's weight (stats,
// quantize, report) runs on, the same way for each: its name as `inspect
// --json` lists it, its weight tensor's name (NAME.weight, or NAME.qweight,
// NAME.weight_packed… as it is stored), or NAME.weight for a module that
// stores its weight under another name. Another tensor of a module (its
// scales, say) is no weight: an error names the module to give instead. A
// name that is nothing of the repo gets the nearest module names.
func FindModule(c *checkpoint.Checkpoint, name string) (*scheme.Module, error) {
	if m, ok := c.Module(name); ok {
		if m.Name == name || m.Primary() == name {
			return m, nil
		}
		return nil, fmt.Errorf("%s: %q is a tensor of module %q, not its weight: give %q (decode %q shows the tensor's own values)",
			c.Source.Name(), name, m.Name, m.Name, name)
	}
	if stem, ok := strings.CutSuffix(name, ".weight"); ok {
		if m, ok := c.Module(stem); ok && m.Name == stem {
			return m, nil // NAME.weight of a module stored as qweight, weight_packed, blocks…
		}
	}
	return nil, NotFound(c, name)
}

// NotFound is the error for a name that is no module or tensor of c, with
// up to three module names nearest it.
func NotFound(c *checkpoint.Checkpoint, name string) error {
	if strings.TrimSpace(name) == "" {
		return fmt.Errorf("%s: the module name is empty (inspect --json lists every module)", c.Source.Name())
	}
	msg := fmt.Sprintf("%s: no module or tensor named %q", c.Source.Name(), name)
	if near := nearestModules(c.Modules, name, 3); len(near) > 0 {
		msg += "; nearest: " + strings.Join(near, ", ")
	}
	return fmt.Errorf("%s (inspect --json lists every module)", msg)
}

// nearestModules ranks module names by the longest prefix they share with
// name, then the longest suffix (a misspelt layer number or projection
// keeps both ends), then the smallest difference in length; letters are
// compared without their case (LM_HEAD finds lm_head).
func nearestModules(mods []*scheme.Module, name string, n int) []string {
	type cand struct {
		name           string
		prefix, suffix int
	}
	var cs []cand
	name = strings.ToLower(name)
	for _, m := range mods {
		mn := strings.ToLower(m.Name)
		p := commonPrefix(mn, name)
		s := commonSuffix(mn[p:], name[p:])
		if p+s < len(name)/2 { // nothing alike
			continue
		}
		cs = append(cs, cand{m.Name, p, s})
	}
	slices.SortFunc(cs, func(a, b cand) int {
		if d := (b.prefix + b.suffix) - (a.prefix + a.suffix); d != 0 {
			return d
		}
		return abs(len(a.name)-len(name)) - abs(len(b.name)-len(name))
	})
	var out []string
	for _, c := range cs[:min(n, len(cs))] {
		out = append(out, c.name)
	}
	return out
}

func commonPrefix(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

func commonSuffix(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[len(a)-1-i] == b[len(b)-1-i] {
		i++
	}
	return i
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
