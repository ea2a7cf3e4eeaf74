package ops

import (
	"strings"
	"testing"

	"github.com/quantscope/quantscope/synth"
)

// stats, quantize and report find their module the same way: by its name,
// its weight tensor's name, or NAME.weight where the weight is stored under
// another name; another tensor of a module names the module to give; a
// misspelt name gets the nearest ones.
func TestFindModule(t *testing.T) {
	c := loadRepo(t, synth.GPTQDynamic())
	const down = "model.layers.0.mlp.down_proj"
	for _, name := range []string{down, down + ".qweight", down + ".weight", "model.layers.1.self_attn.o_proj.weight"} {
		m, err := FindModule(c, name)
		if err != nil || m.Name != strings.TrimSuffix(strings.TrimSuffix(name, ".qweight"), ".weight") {
			t.Errorf("%s: %v %v", name, m, err)
		}
	}
	if _, err := FindModule(c, down+".scales"); err == nil || !strings.Contains(err.Error(), `is a tensor of module "`+down+`", not its weight: give "`+down+`"`) {
		t.Errorf("a scales tensor: %v", err)
	}
	_, err := FindModule(c, "model.layers.0.mlp.down_prj")
	if err == nil || !strings.Contains(err.Error(), `no module or tensor named "model.layers.0.mlp.down_prj"; nearest: `+down) {
		t.Errorf("a misspelt name: %v", err)
	}
	if _, err := FindModule(c, strings.ToUpper(down)); err == nil || !strings.Contains(err.Error(), "nearest: "+down) {
		t.Errorf("a name in capitals: %v", err)
	}
	if _, err := FindModule(c, "zzz"); err == nil || strings.Contains(err.Error(), "nearest") {
		t.Errorf("a name like nothing: %v", err)
	}
	if _, err := FindModule(c, ""); err == nil || !strings.Contains(err.Error(), "the module name is empty") || strings.Contains(err.Error(), "nearest") {
		t.Errorf("an empty name: %v", err)
	}
}
