package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantscope/quantscope/companion/localhub"
	"github.com/quantscope/quantscope/synth"
)

// startMain starts quantscope as a long-running process and returns the
// address it printed (serve --demo first generates the demo set: about 15 s
// on a loaded 2-core machine, so the wait is generous).
func startMain(t *testing.T, args ...string) string {
	t.Helper()
	l := startProcess(t, args, nil, 90*time.Second, func(l string) bool { return strings.Contains(l, " on http://") })
	return l[strings.Index(l, " on http://")+4:]
}

// startProcess runs the quantscope main (this test binary re-executed) with
// args, stderr to stderr when given, and returns the first stdout line match
// accepts; the rest of stdout is drained. The process is killed at cleanup.
func startProcess(t *testing.T, args []string, stderr io.Writer, within time.Duration, match func(string) bool) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "QUANTSCOPE_RUN_MAIN=1", "QUANTSCOPE_ARGS="+strings.Join(args, " "))
	if stderr != nil {
		cmd.Stderr = stderr
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(within)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("quantscope %s ended before printing what was awaited", args[0])
			}
			if match(l) {
				go func() {
					for range lines {
					}
				}()
				return l
			}
		case <-timeout:
			t.Fatalf("quantscope %s printed nothing awaited within %v", args[0], within)
		}
	}
}

func stripVolatile(t *testing.T, s string) string {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal([]byte(s), &doc); err != nil {
		t.Fatalf("%v: %.200s", err, s)
	}
	delete(doc, "source")
	delete(doc, "commit")
	delete(doc, "fetch")
	b, _ := json.Marshal(doc)
	return string(b)
}

// The hub as a real process, inspect as a real process, over real sockets.
func TestHubProcess(t *testing.T) {
	dir := demo(t)
	url := startMain(t, "hub", "--addr", "127.0.0.1:0", dir)
	for _, r := range synth.All() {
		remote, stderr, code := runMain(t, "inspect", "--json", "--endpoint", url, r.ID)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", r.ID, code, stderr)
		}
		// Locally the weight_shape values are read; remotely they are inferred,
		// so compare against a local read of the headers alone: the same files
		// with their weight_shape tensors unread give the same inventory.
		var doc struct{ Fetch struct{ Requests int } }
		json.Unmarshal([]byte(remote), &doc)
		if doc.Fetch.Requests == 0 {
			t.Errorf("%s: fetch.requests is 0", r.ID)
		}
		if !strings.Contains(r.ID, "W4A16") && !strings.Contains(r.ID, "W3A16") {
			local, _, _ := runMain(t, "inspect", "--json", filepath.Join(dir, r.ID))
			if stripVolatile(t, local) != stripVolatile(t, remote) {
				t.Errorf("%s: remote inventory differs from local", r.ID)
			}
		}
	}
	// HF_ENDPOINT is the default endpoint, and the URL forms work too.
	t.Setenv("HF_ENDPOINT", url)
	out, stderr, code := runMain(t, "decode", "--rows", "0:1", synth.Org+"/Llama-tiny-NVFP4", "model.layers.0.self_attn.o_proj")
	if code != 0 || !strings.HasPrefix(out, "shape=1,256") {
		t.Fatalf("decode via HF_ENDPOINT: %d %q %s", code, out, stderr)
	}
	out, _, code = runMain(t, "inspect", url+"/"+synth.Org+"/Llama-tiny-NVFP4/tree/main")
	if code != 0 || !strings.Contains(out, "nvfp4") {
		t.Fatalf("tree URL: %d %q", code, out)
	}
}

func TestGatedProcess(t *testing.T) {
	dir := t.TempDir()
	r := synth.AWQInt4()
	r.WriteDir(filepath.Join(dir, r.ID))
	os.WriteFile(filepath.Join(dir, r.ID, localhub.GatedFile), []byte("hf_abc\n"), 0o644)
	url := startMain(t, "hub", "--addr", "127.0.0.1:0", dir)
	_, stderr, code := runMain(t, "inspect", "--endpoint", url, r.ID)
	if code != 1 || !strings.Contains(stderr, "token") || !strings.Contains(stderr, r.ID) {
		t.Fatalf("without token: %d %s", code, stderr)
	}
	if _, stderr, code = runMain(t, "inspect", "--token", "hf_abc", "--endpoint", url, r.ID); code != 0 {
		t.Fatalf("--token: %d %s", code, stderr)
	}
	t.Setenv("HF_TOKEN", "hf_abc")
	if _, stderr, code = runMain(t, "inspect", "--endpoint", url, r.ID); code != 0 {
		t.Fatalf("HF_TOKEN: %d %s", code, stderr)
	}
	// With the CDN on another origin the token goes to the hub only; the
	// signed CDN URL of its redirect is enough there.
	url = startMain(t, "hub", "--addr", "127.0.0.1:0", "--cdn-addr", "127.0.0.1:0", dir)
	if out, stderr, code := runMain(t, "inspect", "--json", "--endpoint", url, r.ID); code != 0 || !strings.Contains(out, `"quantized_modules"`) {
		t.Fatalf("CDN on another origin: %d %s", code, stderr)
	}
}

func TestServeDemo(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	url := startMain(t, "serve", "--demo", "--addr", "127.0.0.1:0")
	out, stderr, code := runMain(t, "inspect", "--json", "--endpoint", url, synth.Org+"/Llama-tiny-FP4-mislabeled")
	if code != 0 || !strings.Contains(out, "config-excludes-quantized") {
		t.Fatalf("serve --demo: %d %s %.200s", code, stderr, out)
	}
}

// A loopback server answers only to its loopback names (DNS rebinding).
func TestServeChecksHost(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	url := startMain(t, "serve", "--addr", "127.0.0.1:0")
	req, _ := http.NewRequest("GET", url+"/", nil)
	req.Host = "evil.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("Host evil.example: %d", resp.StatusCode)
	}
	resp, err = http.Get(url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("own Host: %d", resp.StatusCode)
	}
	resp, err = http.Get(strings.Replace(url, "127.0.0.1", "localhost", 1) + "/quantscope/info")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("localhost: %d", resp.StatusCode)
	}
}

// The local hub of `hub` and `serve` answers CORS to pages on loopback
// origins and to those named with --allow-origin, and to no other web site
// (the folder it serves is this machine's).
func TestHubOrigins(t *testing.T) {
	dir := t.TempDir()
	r := synth.AWQInt4()
	r.WriteDir(filepath.Join(dir, r.ID))
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	for _, base := range []string{
		startMain(t, "hub", "--addr", "127.0.0.1:0", "--allow-origin", "https://page.example", dir),
		startMain(t, "serve", "--addr", "127.0.0.1:0", "--hub", dir, "--allow-origin", "https://page.example"),
	} {
		for origin, allowed := range map[string]bool{"https://page.example": true, "http://localhost:5173": true, "http://127.0.0.1:9": true, "https://evil.example": false, "null": false} {
			req, _ := http.NewRequest("GET", base+"/"+r.ID+"/resolve/main/config.json", nil)
			req.Header.Set("Origin", origin)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get("Access-Control-Allow-Origin"); (got == origin) != allowed || (!allowed && got != "") {
				t.Errorf("%s, Origin %s: Access-Control-Allow-Origin %q (allowed: %v)", base, origin, got, allowed)
			}
		}
	}
	if _, stderr, code := runMain(t, "hub", "--allow-origin", "page.example", dir); code != 1 || !strings.Contains(stderr, "--allow-origin") {
		t.Errorf("hub --allow-origin page.example: %d %s", code, stderr)
	}
}
