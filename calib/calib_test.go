package calib

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
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
	return loadRepo(t, repo), w
}

// loadRepo writes a generated repo and opens it as a model.
func loadRepo(t testing.TB, repo *synth.Repo) *model.Model {
	t.Helper()
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
	return m
}

// The calibration passes see the weight the raw input meets: an AWQ
// layer's stored values times its pre_quant_scale, close to the
// generator's weight; the stored values alone are not.
func TestWeightFoldsPreQuantScale(t *testing.T) {
	repo := synth.ModelOptAWQ()
	m := loadRepo(t, repo)
	seen := 0
	for name, want := range repo.Weights {
		if !slices.Contains(m.Checkpoint().TensorNames(), name+".pre_quant_scale") {
			continue
		}
		seen++
		got, err := weight(m, name)
		if err != nil {
			t.Fatal(err)
		}
		var se, ss float64
		for i, v := range got.Data {
			d := float64(v - want.Data[i])
			se, ss = se+d*d, ss+float64(want.Data[i])*float64(want.Data[i])
		}
		if e := math.Sqrt(se / ss); e > 0.26 { // INT4 group-128's bound (formats/checkpoint's round trip)
			t.Errorf("%s: normalised RMS error %.3f against the generator's weight", name, e)
		}
	}
	if seen == 0 {
		t.Fatal("the ModelOpt AWQ demo has no pre_quant_scale")
	}
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
