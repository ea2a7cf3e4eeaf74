//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/quantscope/quantscope/companion/localhub"
	"github.com/quantscope/quantscope/synth"
)

// A streamed command's resident memory over the network is what its
// checkpoint holds plus a bound, whatever the module's size: `stats` of a
// 235 MB BF16 module from a 180,000-tensor repo (an inventory of about
// 110 MB) peaks within streamBound of `stats` of an 8 MB module of the same
// repo. Before the bound, each 4 MiB read was a fresh buffer and the
// garbage grew to the runtime's default target, as much again as the
// inventory: 60-118 MB more than the small module's run on this VM.
func TestRemoteStreamMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a 180,000-tensor repo and streams 235 MB through the local hub")
	}
	const streamBound = 40 << 20
	srv, _ := r1ShapeHub(t)
	peak := func(module string, want uint64) int64 {
		peakFile := filepath.Join(t.TempDir(), "peak")
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "QUANTSCOPE_PEAK_TO="+peakFile,
			"QUANTSCOPE_ARGS="+strings.Join([]string{"stats", "--json", "--no-cache", "--endpoint", srv.URL, "bench/r1", module}, " "))
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("stats %s: %v\n%s", module, err, errb.String())
		}
		var doc struct {
			BytesRead uint64 `json:"bytes_read"`
		}
		if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
			t.Fatalf("stats %s: %v\n%s", module, err, out.String())
		}
		if doc.BytesRead != want {
			t.Fatalf("stats %s read %d bytes, want the module's %d", module, doc.BytesRead, want)
		}
		b, err := os.ReadFile(peakFile)
		if err != nil {
			t.Fatal(err)
		}
		kib, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil || kib <= 0 {
			t.Skipf("no peak resident set on this system (%q)", b)
		}
		return kib << 10
	}
	small := peak("model.layers.0.self_attn.kv_a_proj_with_mqa", 576*7168*2)
	big := peak("model.layers.0.self_attn.o_proj", 7168*16384*2)
	t.Logf("peak resident: %d MB for the 8 MB module, %d MB for the 235 MB one", small>>20, big>>20)
	if big-small > streamBound {
		t.Errorf("streaming 235 MB instead of 8 MB took %d MB more resident memory, over the %d MB bound", (big-small)>>20, streamBound>>20)
	}
}

// r1ShapeHub serves the 180,000-tensor DeepSeek-R1-FP4-shaped repo (sparse
// shards) as bench/r1 from a local hub, counting the bytes it sends.
func r1ShapeHub(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	h, err := localhub.New(r1ShapeRoot(t), localhub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(countingWriter{w, &sent}, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &sent
}

// r1ShapeRoot writes the 180,000-tensor DeepSeek-R1-FP4-shaped repo (8
// sparse shards) as bench/r1 under a new folder, for a local hub.
func r1ShapeRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if _, _, err := synth.WriteDeepSeekR1FP4Shape(filepath.Join(root, "bench", "r1"), 8); err != nil {
		t.Fatal(err)
	}
	return root
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n.Add(int64(n))
	return n, err
}

// A row slice decoded over the network reads its rows, not the read-ahead
// and prefetch past them: `decode --rows 0:40` of a 16384-wide BF16 module
// (five bands of 8 rows, 1.3 MB) costs about 1 MB more than `--rows 0:8`
// (one band), where reading ahead to the tensor's end would fetch 16 MiB;
// an NVFP4 module's scales stop at the slice's last row as its codes do.
func TestRemoteRowSliceReadsItsRows(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a 180,000-tensor repo")
	}
	srv, sent := r1ShapeHub(t)
	fetched := func(module, rows string) int64 {
		sent.Store(0)
		out := filepath.Join(t.TempDir(), "w.f32")
		if _, errs, code := runMain(t, "decode", "--no-cache", "--endpoint", srv.URL, "--rows", rows, "--out", out, "bench/r1", module); code != 0 {
			t.Fatalf("decode --rows %s: %s", rows, errs)
		}
		if fi, err := os.Stat(out); err != nil || fi.Size() == 0 {
			t.Fatalf("decode --rows %s wrote nothing: %v", rows, err)
		}
		return sent.Load()
	}
	const bf16 = "model.layers.0.self_attn.o_proj"
	one, five := fetched(bf16, "0:8"), fetched(bf16, "0:40")
	t.Logf("%s: bytes sent: %d for 8 rows, %d for 40 rows", bf16, one, five)
	if d := five - one; d < 32*16384*2 || d > 2<<20 {
		t.Errorf("%s: 32 more rows of 32 KiB cost %d bytes more, want about 1 MiB", bf16, d)
	}
	// an NVFP4 expert, 7168 wide (18-row bands): its scales, 448 bytes a
	// row, stop at the slice's last row too (the tensor's rows 90..2047
	// would add 858 KB)
	const nvfp4 = "model.layers.5.mlp.experts.7.gate_proj"
	one, five = fetched(nvfp4, "0:8"), fetched(nvfp4, "0:90")
	t.Logf("%s: bytes sent: %d for 8 rows, %d for 90 rows", nvfp4, one, five)
	// (the 8-row run's first scale read is widened to 16 KiB: rows 8..36
	// of the scales come with it)
	if d := five - one; d < 82*(3584+448)-16<<10 || d > 82*(3584+448)+64<<10 {
		t.Errorf("%s: 82 more rows of 4032 bytes cost %d bytes more, want about %d", nvfp4, d, 82*(3584+448))
	}
}

// The collector's target gives the live heap about streamHeadroom of room,
// between 25% and the default 100%.
func TestStreamGCPercent(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{{0, 100}, {1 << 20, 100}, {streamHeadroom, 100}, {2 * streamHeadroom, 50}, {100 * streamHeadroom, 25}} {
		if got := streamGCPercent(c.live); got != c.want {
			t.Errorf("streamGCPercent(%d) = %d, want %d", c.live, got, c.want)
		}
	}
}
