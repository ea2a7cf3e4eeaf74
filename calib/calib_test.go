package calib

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/model"
	"github.com/quantscope/quantscope/synth"
)

func loadLlama(t testing.TB, storage string) (*model.Model, map[string]synth.Matrix) {
	t.Helper()
	return loadLlamaWith(t, storage, nil)
}

// loadLlamaWith is loadLlama with the weights changed by edit first.
func loadLlamaWith(t testing.TB, storage string, edit func(map[string]synth.Matrix)) (*model.Model, map[string]synth.Matrix) {
	t.Helper()
	s := synth.SmallLlama()
	w := synth.LlamaWeights(s)
	if edit != nil {
		edit(w)
	}
	repo, err := synth.LlamaRepo(s, w, storage)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := repo.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	src, err := hub.OpenLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.Load(context.Background(), src, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m, err := model.New(c, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	return m, w
}

// dataFile writes sequences of the given lengths (ids from a small LCG).
func dataFile(t testing.TB, lengths ...int) *Data {
	t.Helper()
	var b strings.Builder
	x := uint32(12345)
	for _, n := range lengths {
		for i := range n {
			x = x*1103515245 + 12345
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprint(&b, x>>16%512)
		}
		b.WriteByte('\n')
	}
	p := filepath.Join(t.TempDir(), "calib.txt")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := ReadData(p)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
