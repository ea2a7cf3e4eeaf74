package session

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quantscope/quantscope/companion/localhub"
	"github.com/quantscope/quantscope/synth"
)

// TestWasmUnderNode runs wasm/jsfetch's tests compiled to js/wasm under Node
// (Go's go_js_wasm_exec), against a local hub served here: the browser-side
// Fetcher and the whole pipeline on fetch, outside a browser.
func TestWasmUnderNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed; the js/wasm tests need it")
	}
	_ = node
	r := synth.ModelOptNVFP4()
	dir := t.TempDir()
	if err := r.WriteDir(filepath.Join(dir, filepath.FromSlash(r.ID))); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "slow", "repo"), 0o755)
	os.WriteFile(filepath.Join(dir, "slow", "repo", "config.json"), []byte(`{}`), 0o644)
	h, err := localhub.New(dir, localhub.Options{Faults: func(req *http.Request, p string, n int) localhub.Fault {
		if strings.Contains(req.URL.Path, "/slow/") {
			return localhub.Fault{SlowBody: 10 * time.Second}
		}
		return localhub.Fault{}
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	s, err := Open(context.Background(), r.ID, Options{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.InventoryJSON(false)
	s.Close()
	var inv struct{ Summary struct{ Parameters uint64 } }
	json.Unmarshal(b, &inv)

	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	wasmExec := filepath.Join(runtime.GOROOT(), "lib", "wasm")
	cmd := exec.Command(goBin, "test", "-count=1", "-v", "../jsfetch")
	cmd.Env = append(os.Environ(), "GOOS=js", "GOARCH=wasm", "PATH="+wasmExec+string(os.PathListSeparator)+os.Getenv("PATH"),
		"QUANTSCOPE_TEST_HUB="+srv.URL, "QUANTSCOPE_TEST_REPO="+r.ID, fmt.Sprintf("QUANTSCOPE_TEST_PARAMS=%d", inv.Summary.Parameters))
	out, err := cmd.CombinedOutput()
	t.Logf("js/wasm tests:\n%s", out)
	if err != nil {
		t.Fatalf("js/wasm tests failed: %v", err)
	}
	if strings.Contains(string(out), "SKIP") || !strings.Contains(string(out), "--- PASS: TestSessionOverFetch") {
		t.Fatal("js/wasm tests did not all run")
	}
}
