package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/synth"
)

// A repo without an index is its top-level .safetensors files, as loaders
// read it: a stray shard in a subfolder (another model's, an "original/"
// copy) is set aside with a note instead of merged into the inventory. A
// folder whose subfolders each hold a model is refused, not merged; one
// subfolder alone (a diffusers-style layout) is the model.
func TestSubfolderShards(t *testing.T) {
	nvfp4, awq := synth.ModelOptNVFP4(), synth.AWQInt4()
	loadDir := func(dir string) (*Checkpoint, error) {
		src, err := hub.OpenLocal(dir)
		if err != nil {
			t.Fatal(err)
		}
		return Load(context.Background(), src, Options{})
	}
	alone := filepath.Join(t.TempDir(), "alone")
	if err := nvfp4.WriteDir(alone); err != nil {
		t.Fatal(err)
	}
	want, err := loadDir(alone)
	if err != nil {
		t.Fatal(err)
	}

	// A stray shard below the repo's top: the same inventory, and a note.
	stray := filepath.Join(t.TempDir(), "stray")
	nvfp4.WriteDir(stray)
	awq.WriteDir(filepath.Join(stray, "original"))
	os.Remove(filepath.Join(stray, "original", "config.json"))
	c, err := loadDir(stray)
	if err != nil {
		t.Fatal(err)
	}
	got, ref := c.Inventory(), want.Inventory()
	if got.Summary.Parameters != ref.Summary.Parameters || got.Summary.Bytes != ref.Summary.Bytes || got.Summary.Files != ref.Summary.Files {
		t.Errorf("with a stray shard: %+v; alone %+v", got.Summary, ref.Summary)
	}
	notes := 0
	for _, f := range c.Findings {
		if f.Rule == RuleSubfolderShard && strings.Contains(f.Message, "original/") {
			notes++
		}
	}
	if notes == 0 || got.Summary.Errors != 0 {
		t.Errorf("findings %+v", c.Findings)
	}

	// Two models side by side, nothing at the top: refused, naming both.
	parent := t.TempDir()
	nvfp4.WriteDir(filepath.Join(parent, "a"))
	awq.WriteDir(filepath.Join(parent, "b"))
	if _, err := loadDir(parent); err == nil || !strings.Contains(err.Error(), "rule no-safetensors") || !strings.Contains(err.Error(), "(a/, b/)") {
		t.Errorf("a folder of two repos: %v", err)
	}

	// One subfolder alone is the model.
	one := t.TempDir()
	nvfp4.WriteDir(filepath.Join(one, "transformer"))
	c, err = loadDir(one)
	if err != nil || c.Inventory().Summary.Bytes != ref.Summary.Bytes {
		t.Errorf("one subfolder: %v", err)
	}
}
