package cuda

// Parity of the real worker's kernels with the CPU backend. These tests
// build the cuda-tagged worker (or use $QUANTSCOPE_CUDA_WORKER) and exec
// it; they skip, saying why, when it cannot be built or finds no GPU. They
// cannot import gorgonia.org/cu: its init exits the process without a GPU.

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
)

var realWorker struct {
	once            sync.Once
	dir, path, skip string // dir (the build's) is removed by TestMain
}

// gpuBackend returns a backend on the real worker, or skips.
func gpuBackend(tb testing.TB) *Backend {
	tb.Helper()
	realWorker.once.Do(func() {
		if p := os.Getenv(WorkerEnv); p != "" {
			realWorker.path = p
			return
		}
		dir, err := os.MkdirTemp("", "qscuda")
		if err != nil {
			realWorker.skip = err.Error()
			return
		}
		realWorker.dir = dir // removed by TestMain
		p := filepath.Join(dir, WorkerName)
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-tags", "cuda", "-o", p, "./worker")
		if out, err := cmd.CombinedOutput(); err != nil {
			lines := strings.SplitN(strings.TrimSpace(string(out)), "\n", 3)
			realWorker.skip = "cannot build the cuda worker here (needs cuda.h and libcuda.so; see README \"CUDA backend\"): " + strings.Join(lines[:min(len(lines), 2)], " / ")
			return
		}
		realWorker.path = p
	})
	if realWorker.skip != "" {
		tb.Skip(realWorker.skip)
	}
	w, err := StartWorker(realWorker.path, 0)
	var ng *NoGPUError
	if errors.As(err, &ng) {
		tb.Skip("the cuda worker reports no usable GPU: " + ng.Reason)
	}
	if err != nil {
		tb.Fatal(err)
	}
	var fell []string
	b := &Backend{Backend: cpu.New(), Path: realWorker.path, w: w, gpu: &GPU{Name: w.Hello.Name}, Log: func(s string) { fell = append(fell, s) }}
	tb.Cleanup(func() {
		b.Close()
		if len(fell) > 0 {
			tb.Errorf("work fell back to the CPU: %v", fell)
		}
	})
	tb.Logf("GPU: %s, %d MiB, compute capability %d.%d", w.Hello.Name, w.Hello.TotalMem>>20, w.Hello.Major, w.Hello.Minor)
	return b
}

// wideWeight spans float32's range: rows from 2^-40 to 2^40, zeros, −0,
// values on E2M1 ties for the max recipe's scales.
func wideWeight(rows, cols int, seed uint64) kernels.Matrix {
	r := rand.New(rand.NewPCG(seed, 7))
	w := kernels.Matrix{Rows: rows, Cols: cols, Data: make([]float32, rows*cols)}
	for i := range w.Data {
		row := i / cols
		v := float32(r.NormFloat64() * math.Pow(2, float64(row%81-40)))
		switch r.IntN(20) {
		case 0:
			v = 0
		case 1:
			v = float32(math.Copysign(0, -1))
		case 2:
			v = float32(r.IntN(13)-6) * 0.25 // E2M1 midpoints at scale 1
		}
		w.Data[i] = v
	}
	return w
}

func TestGPUParityQuantizeNVFP4(t *testing.T) {
	b := gpuBackend(t)
	for _, shape := range [][2]int{{1, 16}, {97, 1024}, {512, 4096}} {
		w := wideWeight(shape[0], shape[1], uint64(shape[0]))
		for _, recipe := range []string{kernels.RecipeMax, kernels.RecipeMSE} {
			got, want := nvfp4Both(t, b, w, kernels.NVFP4Options{Recipe: recipe})
			for i := range want.Scales {
				if got.Scales[i] != want.Scales[i] {
					t.Fatalf("%s %v: block %d scale code %#x, CPU %#x", recipe, shape, i, got.Scales[i], want.Scales[i])
				}
			}
			for i := range want.Packed {
				if got.Packed[i] != want.Packed[i] {
					t.Fatalf("%s %v: byte %d (values %d, %d) is %#x, CPU %#x", recipe, shape, i, 2*i, 2*i+1, got.Packed[i], want.Packed[i])
				}
			}
			sameNVFP4(t, recipe, got, want)
		}
	}
}

func TestGPUParityDequant(t *testing.T) {
	b := gpuBackend(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(11, 11))
	// FP8: every code, tensor/row/ragged block grids, both formats, inverse
	rows, cols := 300, 520
	codes := make([]byte, rows*cols)
	for i := range codes {
		codes[i] = byte(i)
	}
	r.Shuffle(len(codes), func(i, j int) { codes[i], codes[j] = codes[j], codes[i] })
	for _, g := range []FP8Grid{
		{Rows: rows, Cols: cols, R: rows, C: cols},
		{Rows: rows, Cols: cols, R: 1, C: cols, E5M2: true},
		{Rows: rows, Cols: cols, R: 128, C: 128, Inverse: true},
		{Rows: rows, Cols: cols, R: 128, C: 128, E5M2: true},
	} {
		sc := make([]float32, (rows+g.R-1)/g.R*g.scaleCols())
		for i := range sc {
			sc[i] = float32(math.Ldexp(r.Float64()+0.5, r.IntN(40)-30))
		}
		got, err := b.DequantFP8(ctx, codes, sc, g)
		if err != nil {
			t.Fatal(err)
		}
		dec := numeric.E4M3ToFloat32
		if g.E5M2 {
			dec = numeric.E5M2ToFloat32
		}
		want := make([]float32, len(codes))
		for i, c := range codes { // formats/scheme's FP8 decode
			s := sc[(i/cols)/g.R*g.scaleCols()+(i%cols)/g.C]
			if g.Inverse {
				want[i] = dec(c) / s
			} else {
				want[i] = dec(c) * s
			}
		}
		sameF32(t, "fp8", got, want)
	}
	// NVFP4, both namings, every scale code
	packed := make([]byte, 8*256*4)
	scales := make([]byte, 256*4)
	for i := range packed {
		packed[i] = byte(r.IntN(256))
	}
	for i := range scales {
		scales[i] = byte(i)
	}
	for _, global := range []float32{NVFP4Global(0.0123, false), NVFP4Global(448*6/3.7, true)} {
		got, err := b.DequantNVFP4(ctx, packed, scales, global)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float32, 2*len(packed))
		bs := make([]float32, len(scales))
		for i, c := range scales {
			bs[i] = numeric.E4M3ToFloat32(c) * global
		}
		numeric.DecodeE2M1Blocks(want, packed, bs, 16)
		sameF32(t, "nvfp4", got, want)
	}
	// MXFP4, every E8M0 code
	mx := make([]byte, 16*256)
	for i := range mx {
		mx[i] = byte(r.IntN(256))
	}
	e8 := make([]byte, 256)
	for i := range e8 {
		e8[i] = byte(i)
	}
	got, err := b.DequantMXFP4(ctx, mx, e8)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, 2*len(mx))
	if err := packing.DecodeMXFP4(want, mx, e8); err != nil {
		t.Fatal(err)
	}
	sameF32(t, "mxfp4", got, want)
}

func TestGPUParityW4AFP8(t *testing.T) {
	b := gpuBackend(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 5))
	for _, s := range [][3]int{{1, 128, 32}, {7, 512, 96}, {64, 4096, 1024}} {
		T, K, N := s[0], s[1], s[2]
		x := wideWeight(T, K, uint64(K))
		w := &kernels.W4AWeight{Name: "m", In: K, Out: N, Codes: make([]int8, K*N), Scales: make([]float32, K/128*N), Bias: make([]float32, N)}
		for i := range w.Codes {
			w.Codes[i] = int8(r.IntN(16) - 8)
		}
		for i := range w.Scales {
			w.Scales[i] = float32(math.Ldexp(r.Float64()+0.5, -r.IntN(12)))
		}
		for i := range w.Bias {
			w.Bias[i] = float32(r.NormFloat64())
		}
		got, err := b.W4AFP8(ctx, x, w)
		if err != nil {
			t.Fatal(err)
		}
		want, err := cpu.New().W4AFP8(ctx, x, w)
		if err != nil {
			t.Fatal(err)
		}
		sameF32(t, "w4a_fp8", got.Data, want.Data)
	}
}
