package cuda

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
)

// openMulti opens every fake GPU of QSC_FAKE_FREE (MiB free each) with
// OpenAll, the way the companion does, logging each device's ops to dir.
func openMulti(t *testing.T, free string) (*Backend, *logger, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Setenv("QSC_FAKE_WORKER", "multi")
	t.Setenv("QSC_FAKE_FREE", free)
	t.Setenv("QSC_FAKE_LOG", dir)
	l := &logger{}
	b := OpenAll(exe, l.log)
	t.Cleanup(b.Close)
	return b, l, dir
}

func opsOn(t *testing.T, dir string, dev string) string {
	b, err := os.ReadFile(filepath.Join(dir, dev))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// One worker a GPU; each call goes to the GPU with the most free memory, and
// to the CPU when none has what the call needs.
func TestMultiGPU(t *testing.T) {
	b, l, dir := openMulti(t, "8192,61440,100")
	gpus := b.GPUs(context.Background())
	if len(gpus) != 3 || gpus[0].Name != "Fake GPU 0" || gpus[1].Name != "Fake GPU 1" || gpus[2].FreeBytes != 100<<20 {
		t.Fatalf("GPUs() = %+v", gpus)
	}
	if b.Name() != "cuda: Fake GPU 0, Fake GPU 1, Fake GPU 2" {
		t.Fatalf("Name() = %q", b.Name())
	}
	codes := []byte{0x38, 0x40, 0xB8, 0x7E, 0x00, 0x01, 0x7F, 0xC0}
	g := FP8Grid{Rows: 2, Cols: 4, R: 1, C: 4}
	got, err := b.DequantFP8(context.Background(), codes, []float32{0.5, 2}, g)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := (&Backend{Backend: cpu.New(), Path: "/nonexistent"}).DequantFP8(context.Background(), codes, []float32{0.5, 2}, g)
	sameF32(t, "on the GPU with the most free memory", got, want)
	if a, b1, c := opsOn(t, dir, "dev0"), opsOn(t, dir, "dev1"), opsOn(t, dir, "dev2"); a != "" || b1 != "dequant_fp8" || c != "" {
		t.Fatalf("ops by device: %q %q %q, want the call on device 1 only", a, b1, c)
	}
	if l.n() != 0 {
		t.Fatalf("unexpected log: %q", l.all())
	}

	// A call larger than every GPU's free memory runs on the CPU and says so.
	b, l, dir = openMulti(t, "1,2")
	w := testWeight(512, 4096, 7) // 8 MiB of float32 alone
	if _, err := b.QuantizeNVFP4(context.Background(), w, kernels.NVFP4Options{}, nil); err != nil {
		t.Fatal(err)
	}
	if msg := l.all(); !strings.Contains(msg, "no GPU has the") || !strings.Contains(msg, "2 MiB on Fake GPU 1, device 1") {
		t.Fatalf("message %q", msg)
	}
	if opsOn(t, dir, "dev0")+opsOn(t, dir, "dev1") != "" {
		t.Fatal("a call that fits no GPU reached a worker")
	}
}
