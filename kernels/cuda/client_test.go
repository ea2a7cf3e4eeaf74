package cuda

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
)

// logger collects the backend's fallback messages.
type logger struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logger) log(s string) { l.mu.Lock(); l.msgs = append(l.msgs, s); l.mu.Unlock() }
func (l *logger) all() string  { l.mu.Lock(); defer l.mu.Unlock(); return strings.Join(l.msgs, "\n") }
func (l *logger) n() int       { l.mu.Lock(); defer l.mu.Unlock(); return len(l.msgs) }

func openFake(t *testing.T, mode string) (*Backend, *logger) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("QSC_FAKE_WORKER", mode)
	l := &logger{}
	b := Open(exe, 0, l.log)
	t.Cleanup(b.Close)
	return b, l
}

// testWeight is a weight whose rows span many magnitudes, so that block
// scales cover normal and subnormal E4M3 codes.
func testWeight(rows, cols int, seed uint64) kernels.Matrix {
	r := rand.New(rand.NewPCG(seed, 1))
	w := kernels.Matrix{Rows: rows, Cols: cols, Data: make([]float32, rows*cols)}
	for i := range w.Data {
		w.Data[i] = float32(r.NormFloat64() * math.Pow(2, float64(-(i/cols)%12)))
	}
	return w
}

func sameNVFP4(t *testing.T, what string, got, want *kernels.NVFP4Result) {
	t.Helper()
	if got.Scale2 != want.Scale2 || string(got.Packed) != string(want.Packed) || string(got.Scales) != string(want.Scales) {
		t.Fatalf("%s: result differs from the CPU backend's (scale2 %g vs %g)", what, got.Scale2, want.Scale2)
	}
}

func sameF32(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
			t.Fatalf("%s: value %d is %g, want %g", what, i, got[i], want[i])
		}
	}
}

func TestFakeWorkerHello(t *testing.T) {
	b, l := openFake(t, "cpu")
	if b.Name() != "cuda: Fake GPU" {
		t.Fatalf("Name() = %q", b.Name())
	}
	g := b.GPUs(context.Background())
	if len(g) != 1 || g[0].Name != "Fake GPU" || g[0].TotalBytes != 96<<30 || g[0].FreeBytes != 80<<30 || g[0].Major != 9 {
		t.Fatalf("GPUs() = %+v", g)
	}
	if l.n() != 0 {
		t.Fatalf("unexpected messages: %s", l.all())
	}
}

// TestFakeWorkerOps sends every operation through the client's packing,
// the wire and back: results equal the CPU backend's bit for bit.
func TestFakeWorkerOps(t *testing.T) {
	b, l := openFake(t, "cpu")
	ref := cpu.New()
	ctx := context.Background()
	w := testWeight(12, 64, 1)
	for _, recipe := range []string{kernels.RecipeMax, kernels.RecipeMSE} {
		got, err := b.QuantizeNVFP4(ctx, w, kernels.NVFP4Options{Recipe: recipe}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ref.QuantizeNVFP4(ctx, w, kernels.NVFP4Options{Recipe: recipe}, nil)
		sameNVFP4(t, recipe, got, want)

		y, err := b.DequantNVFP4(ctx, got.Packed, got.Scales, got.Scale2)
		if err != nil {
			t.Fatal(err)
		}
		sameF32(t, "nvfp4 dequant", y, (&Backend{Backend: ref, Path: "/nonexistent"}).mustNVFP4(t, got))
	}

	// W4A-FP8 with a bias: the nibble packing and the bias added here
	x := testWeight(3, 256, 2)
	wt := &kernels.W4AWeight{Name: "m", In: 256, Out: 32, Codes: make([]int8, 256*32), Scales: make([]float32, 2*32), Bias: make([]float32, 32)}
	r := rand.New(rand.NewPCG(3, 3))
	for i := range wt.Codes {
		wt.Codes[i] = int8(r.IntN(16) - 8)
	}
	for i := range wt.Scales {
		wt.Scales[i] = float32(r.Float64() * 0.01)
	}
	for i := range wt.Bias {
		wt.Bias[i] = float32(r.NormFloat64())
	}
	got, err := b.W4AFP8(ctx, x, wt)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ref.W4AFP8(ctx, x, wt)
	sameF32(t, "w4a_fp8", got.Data, want.Data)

	// FP8 with a ragged block grid, inverse scales, e5m2
	codes := make([]byte, 5*7)
	for i := range codes {
		codes[i] = byte(r.IntN(256))
	}
	scales := []float32{0.5, 3, 1e-3, 7}
	for _, g := range []FP8Grid{{Rows: 5, Cols: 7, R: 4, C: 4}, {Rows: 5, Cols: 7, R: 4, C: 4, Inverse: true, E5M2: true}} {
		got, err := b.DequantFP8(ctx, codes, scales, g)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := (&Backend{Backend: ref, Path: "/nonexistent"}).DequantFP8(ctx, codes, scales, g)
		sameF32(t, "fp8", got, want)
	}
	if _, err := b.DequantFP8(ctx, codes, scales[:3], FP8Grid{Rows: 5, Cols: 7, R: 4, C: 4}); err == nil || !strings.Contains(err.Error(), "fp8-scale-shape") {
		t.Fatalf("short scale grid: %v", err)
	}
	if l.n() != 0 {
		t.Fatalf("fell back to the CPU: %s", l.all())
	}
}

func (b *Backend) mustNVFP4(t *testing.T, r *kernels.NVFP4Result) []float32 {
	v, err := b.DequantNVFP4(context.Background(), r.Packed, r.Scales, r.Scale2)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestTextFirst: a worker that prints something else first (gorgonia.org/cu's
// cuInit failure) means no GPU: a message says so, work runs on the CPU.
func TestTextFirst(t *testing.T) {
	b, l := openFake(t, "text")
	if !strings.HasPrefix(b.Name(), "cpu (") {
		t.Fatalf("Name() = %q, want the CPU's", b.Name())
	}
	if !strings.Contains(l.all(), "no usable GPU") || !strings.Contains(l.all(), "no CUDA-capable device is detected") {
		t.Fatalf("message %q does not say what the worker printed", l.all())
	}
	if g := b.GPUs(context.Background()); len(g) != 0 {
		t.Fatalf("GPUs() = %+v", g)
	}
	w := testWeight(2, 32, 4)
	got, err := b.QuantizeNVFP4(context.Background(), w, kernels.NVFP4Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := cpu.New().QuantizeNVFP4(context.Background(), w, kernels.NVFP4Options{}, nil)
	sameNVFP4(t, "fallback", got, want)
	// Open said why the kernels run on the CPU; the job does not say it again
	if l.n() != 1 || !strings.HasSuffix(l.all(), "; kernels run on the CPU") {
		t.Fatalf("fallback messages: %q", l.all())
	}
}

func TestExitFirst(t *testing.T) {
	_, l := openFake(t, "exit")
	if !strings.Contains(l.all(), "exited before its hello") {
		t.Fatalf("message %q", l.all())
	}
}

func TestMissingWorker(t *testing.T) {
	l := &logger{}
	b := Open(filepath.Join(t.TempDir(), WorkerName), 0, l.log)
	defer b.Close()
	if !strings.Contains(l.all(), "no worker binary there (make cuda builds it") {
		t.Fatalf("message %q", l.all())
	}
	// The jobs that follow run on the CPU for that same reason: said once,
	// not again for each (stats printed it twice).
	ctx := context.Background()
	w := testWeight(4, 32, 5)
	for range 2 {
		if _, err := b.QuantizeNVFP4(ctx, w, kernels.NVFP4Options{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if l.n() != 1 {
		t.Errorf("%d lines for one missing worker: %q", l.n(), l.all())
	}
}

// TestDieMidJob: the job the worker died in finishes on the CPU with a
// message naming the death; the next job starts a new worker.
func TestDieMidJob(t *testing.T) {
	t.Setenv("QSC_FAKE_DIED", filepath.Join(t.TempDir(), "died"))
	b, l := openFake(t, "die")
	ctx := context.Background()
	w := testWeight(4, 32, 5)
	want, _ := cpu.New().QuantizeNVFP4(ctx, w, kernels.NVFP4Options{}, nil)
	got, err := b.QuantizeNVFP4(ctx, w, kernels.NVFP4Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameNVFP4(t, "after the death", got, want)
	msg := l.all()
	if !strings.Contains(msg, "died during quant_nvfp4") || !strings.Contains(msg, "illegal memory access") || !strings.Contains(msg, "restarts for the next job") {
		t.Fatalf("message %q", msg)
	}
	first := b.w
	got, err = b.QuantizeNVFP4(ctx, w, kernels.NVFP4Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameNVFP4(t, "restarted", got, want)
	if l.n() != 1 || b.w == first || b.w == nil || b.w.Dead() != nil {
		t.Fatalf("the second job did not run on a new worker: %q", l.all())
	}
}

// TestCancel: cancelling a job stops the worker (stdin closed, then killed:
// this one ignores its stdin) and returns the context's error.
func TestCancel(t *testing.T) {
	old := StopGrace
	StopGrace = 200 * time.Millisecond
	defer func() { StopGrace = old }()
	b, _ := openFake(t, "hang")
	w := b.w
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := b.QuantizeNVFP4(ctx, testWeight(2, 32, 6), kernels.NVFP4Options{}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker still runs after the cancel")
	}
	if w.Dead() == nil {
		t.Fatal("a stopped worker is not marked dead")
	}
}

func TestLowMemory(t *testing.T) {
	b, l := openFake(t, "lowmem")
	if _, err := b.QuantizeNVFP4(context.Background(), testWeight(64, 4096, 7), kernels.NVFP4Options{}, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(l.all(), "Fake GPU has 1 MiB free, the job needs") {
		t.Fatalf("message %q", l.all())
	}
}
