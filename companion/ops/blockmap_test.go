package ops

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
)

// blockMapRef is the plain reference: for every cell, walk its rows and
// columns from the bounds floor(i·rows/R) .. floor((i+1)·rows/R).
func blockMapRef(marks []byte, rows, cols, r, c int) []byte {
	out := make([]byte, r*c)
	for i := 0; i < r; i++ {
		for j := 0; j < c; j++ {
			var sum, n int
			for y := i * rows / r; y < (i+1)*rows/r; y++ {
				for x := j * cols / c; x < (j+1)*cols/c; x++ {
					sum += int(marks[y*cols+x])
					n++
				}
			}
			v := int((float64(sum)*255)/float64(n) + 0.5)
			if v == 0 && sum > 0 {
				v = 1
			}
			out[i*c+j] = byte(v)
		}
	}
	return out
}

func TestBlockMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, sz := range [][2]int{{1, 1}, {7, 3}, {256, 256}, {257, 300}, {1000, 17}, {513, 1024}} {
		rows, cols := sz[0], sz[1]
		marks := make([]byte, rows*cols)
		for k := range marks {
			if rng.IntN(5) == 0 {
				marks[k] = 1
			}
		}
		marks[len(marks)-1] = 1
		got, r, c := BlockMap(marks, rows, cols)
		if r != min(rows, MaxBlockMap) || c != min(cols, MaxBlockMap) || len(got) != r*c {
			t.Fatalf("%v: %d×%d map of %d", sz, r, c, len(got))
		}
		want := blockMapRef(marks, rows, cols, r, c)
		for k := range want {
			if got[k] != want[k] {
				t.Fatalf("%v: cell %d = %d, want %d", sz, k, got[k], want[k])
			}
		}
		if got[len(got)-1] == 0 {
			t.Fatalf("%v: the last cell holds a marked block but reads 0", sz)
		}
	}
	// One marked block among 600 per cell stays visible (1, not 0).
	marks := make([]byte, 256*600)
	marks[605] = 1
	got, _, _ := BlockMap(marks, 256*600, 1)
	if got[1] != 1 || got[0] != 0 {
		t.Fatalf("a lone change: cells %v", got[:3])
	}
}

// The report op's per-block maps are the kernel's changed maps (0/1 → 0/255)
// for a module within the bound.
func TestReportBlockMaps(t *testing.T) {
	srcPath, w, _ := denseSource(t, 16, 64)
	src := load(t, srcPath)
	op, _ := Lookup("report")
	res, err := op(context.Background(), Env{Checkpoint: src, Backend: cpu.New()}, testModule, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := (&cpu.Backend{Workers: 1}).RecipeReport(context.Background(), kernels.Matrix{Rows: 16, Cols: 64, Data: w}, kernels.ReportOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for i, r := range rep.Recipes {
		a := res.Arrays[i]
		if a.Name != "blocks_changed."+r.Recipe || a.Shape[0] != 16 || a.Shape[1] != 4 || len(a.U8) != 64 {
			t.Fatalf("array %d: %s %v (%d bytes)", i, a.Name, a.Shape, len(a.U8))
		}
		for k, c := range r.Changed {
			if a.U8[k] != 255*c {
				t.Fatalf("%s block %d: map %d, kernel %d", r.Recipe, k, a.U8[k], c)
			}
			changed += int(c)
		}
	}
	if changed == 0 {
		t.Fatal("no recipe changed any block: the comparison checks nothing")
	}
}
