//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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
	root := t.TempDir()
	if _, _, err := synth.WriteDeepSeekR1FP4Shape(filepath.Join(root, "bench", "r1"), 8); err != nil {
		t.Fatal(err)
	}
	h, err := localhub.New(root, localhub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	peak := func(module string, want uint64) int64 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "QUANTSCOPE_RUN_MAIN=1",
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
		ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		if !ok {
			t.Skip("no rusage on this system")
		}
		return ru.Maxrss << 10 // kilobytes on Linux
	}
	small := peak("model.layers.0.self_attn.kv_a_proj_with_mqa", 576*7168*2)
	big := peak("model.layers.0.self_attn.o_proj", 7168*16384*2)
	t.Logf("peak resident: %d MB for the 8 MB module, %d MB for the 235 MB one", small>>20, big>>20)
	if big-small > streamBound {
		t.Errorf("streaming 235 MB instead of 8 MB took %d MB more resident memory, over the %d MB bound", (big-small)>>20, streamBound>>20)
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
