// Package e2e drives the real page in Debian's headless Chromium (chromedp)
// against `quantscope serve --demo` run as a process, and checks that what
// the page shows equals what `quantscope inspect --json` and `decode --json`
// print for the same repos. Screenshots go to test-output/ (not committed).
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

var (
	binDir  string // quantscope, quantscope.wasm, wasm_exec.js
	outDir  string // screenshots and figures
	browser string
)

func TestMain(m *testing.M) {
	code, err := setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		if binDir != "" {
			os.RemoveAll(binDir)
		}
		os.Exit(1)
	}
	if code >= 0 {
		os.Exit(code)
	}
	code = m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

// setup builds the binary and the wasm engine and finds Chromium. Without
// Chromium the tests cannot run: outside CI they skip with a message, in CI
// (CI=true) that is a failure, since .ci/run installs it.
func setup() (int, error) {
	for _, name := range []string{os.Getenv("CHROME"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		if os.Getenv("CI") == "true" {
			return 1, fmt.Errorf("no Chromium found (CI installs Debian's chromium; set CHROME to its path)")
		}
		fmt.Println("e2e: SKIP: no chromium on PATH (apt-get install chromium, or set CHROME); the page tests did not run")
		return 0, nil
	}
	var err error
	if binDir, err = os.MkdirTemp("", "quantscope-e2e-"); err != nil {
		return 1, err
	}
	root, _ := filepath.Abs("..")
	outDir = filepath.Join(root, "test-output")
	os.MkdirAll(outDir, 0o755)
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	build := func(env []string, args ...string) error {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %v\n%s", args, err, out)
		}
		return nil
	}
	if err := build(nil, "build", "-o", filepath.Join(binDir, "quantscope"), "./companion"); err != nil {
		return 1, err
	}
	if err := build([]string{"GOOS=js", "GOARCH=wasm"}, "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(binDir, "quantscope.wasm"), "./wasm"); err != nil {
		return 1, err
	}
	js, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "lib", "wasm", "wasm_exec.js"))
	if err != nil {
		return 1, err
	}
	if err := os.WriteFile(filepath.Join(binDir, "wasm_exec.js"), js, 0o644); err != nil {
		return 1, err
	}
	return -1, nil
}

// serve starts `quantscope serve` with the given flags and returns its URL.
func serve(t *testing.T, args ...string) string {
	t.Helper()
	line := serveLine(t, func(l string) bool { return strings.Contains(l, " on http://") }, args...)
	return line[strings.Index(line, " on http://")+4:]
}

// serveLine starts `quantscope serve` on a free loopback port with the
// given flags and returns the first stdout line match accepts (the rest is
// drained); the process is killed at cleanup.
func serveLine(t *testing.T, match func(string) bool, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "quantscope"), append([]string{"serve", "--addr", "127.0.0.1:0", "--wasm", binDir}, args...)...)
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	deadline := time.Now().Add(60 * time.Second)
	for sc.Scan() && time.Now().Before(deadline) {
		if line := sc.Text(); match(line) {
			go func() { // sc.Text's buffer is reused by this Scan: read the line first
				for sc.Scan() {
				}
			}()
			return line
		}
	}
	t.Fatal("serve printed no line awaited")
	return ""
}

// quantscope runs the binary and returns stdout.
func quantscope(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, "quantscope"), args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("quantscope %v: %v: %s", args, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	return out
}

// newBrowser starts headless Chromium with the flags this closed machine
// needs (no background networking, a fresh profile).
func newBrowser(t *testing.T, width, height int, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browser),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(width, height),
	}
	opts = append(opts, extra...)
	// Chromium now and then dies before it listens (a crash report and no
	// DevTools line, seen once in CI while other packages' tests loaded both
	// cores): that is the machine's, not the page's, so a start is tried
	// three times, each failure logged.
	for attempt := 1; ; attempt++ {
		actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel2 := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
		err := chromedp.Do(ctx) // starts the browser, with no timeout on this first call
		if err == nil {
			t.Cleanup(cancel)
			t.Cleanup(cancel2)
			return ctx
		}
		cancel2()
		cancel()
		if attempt == 3 || !strings.Contains(err.Error(), "chrome failed to start") {
			t.Fatal(err)
		}
		t.Logf("Chromium did not start (attempt %d of 3): %.300s", attempt, err)
	}
}

// eval evaluates a JS expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %.120s: %v", expr, err)
	}
	return v
}

// do runs actions, failing the test on error.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// waitJS polls a JS expression until it is truthy.
func waitJS(t *testing.T, ctx context.Context, expr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if eval[bool](t, ctx, "!!("+expr+")") {
			return
		}
		if time.Now().After(deadline) {
			body := eval[string](t, ctx, `document.getElementById("error").innerText + " | " + document.getElementById("progress").innerText`)
			shot(t, ctx, "timeout-"+strings.ReplaceAll(t.Name(), "/", "_"))
			t.Fatalf("timed out waiting for %s (page says: %s)", expr, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openRepo opens the page on repo (served at base) and waits until its
// inventory is on screen.
func openRepo(t *testing.T, ctx context.Context, base, repo string) {
	t.Helper()
	do(t, ctx, chromedp.Navigate(pageURL(base, repo, "")))
	waitJS(t, ctx, fmt.Sprintf("document.body.dataset.loaded === %q", repo), 60*time.Second)
}

// shot saves a full-page screenshot under test-output/.
func shot(t *testing.T, ctx context.Context, name string) {
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(outDir, name+".png")
	if err := os.WriteFile(p, buf, 0o644); err == nil {
		t.Logf("screenshot: %s", p)
	}
}
