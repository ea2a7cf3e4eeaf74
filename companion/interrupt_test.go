//go:build unix

package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantscope/quantscope/companion/localhub"
)

// Ctrl-C during a stream over the network ends the command with one word
// and the shell's status for it (130), not each read's "context canceled";
// no partial --out file is left.
func TestInterruptMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a 180,000-tensor repo")
	}
	h, err := localhub.New(r1ShapeRoot(t), localhub.Options{Latency: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "embed.f32")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "QUANTSCOPE_RUN_MAIN=1",
		"QUANTSCOPE_ARGS="+strings.Join([]string{"decode", "--no-cache", "--endpoint", srv.URL, "--out", out, "bench/r1", "model.embed_tokens"}, " "))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the load (about 1 s at 100 ms a response), then 1.9 GB at 16 MiB a round trip
	cmd.Process.Signal(os.Interrupt)
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 || strings.TrimSpace(stderr.String()) != "interrupted" {
		t.Errorf("interrupted decode: exit %d (%v), stderr %q; want 130 and \"interrupted\"", code, err, stderr.String())
	}
	if left, _ := filepath.Glob(out + "*"); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// A hub that fails every shard (here 404 for each) is one error line that
// names the first shards' errors and counts the rest, not 80 clauses.
func TestEveryShardFailing(t *testing.T) {
	if testing.Short() {
		t.Skip("generates a 180,000-tensor repo")
	}
	h, err := localhub.New(r1ShapeRoot(t), localhub.Options{Faults: func(r *http.Request, p string, n int) localhub.Fault {
		if strings.HasSuffix(p, ".safetensors") {
			return localhub.Fault{Status: 404}
		}
		return localhub.Fault{}
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	_, stderr, code := runMain(t, "inspect", "--no-cache", "--endpoint", srv.URL, "bench/r1")
	if code != 1 || strings.Count(stderr, "\n") != 1 || strings.Count(stderr, "404") != 2 ||
		!strings.Contains(stderr, "model-00001-of-00008.safetensors") || !strings.HasSuffix(stderr, "and 6 more of the 8 shards could not be read\n") {
		t.Errorf("every shard 404: exit %d, %d bytes: %q", code, len(stderr), stderr)
	}
}
