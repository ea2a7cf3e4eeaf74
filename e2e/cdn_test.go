package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/quantscope/quantscope/companion/localhub"
	"github.com/quantscope/quantscope/synth"
)

// The 80-shard repo behind a hub whose CDN is another origin (a second
// port; CORS on both, signed CDN URLs), with 50 ms added to every response,
// as the real hub is reached: the page on a third origin reads it in
// headless Chromium, then `quantscope inspect --json` reads it natively, in
// the same run. The hub counts the requests of each. Requests are asserted
// (two a shard, as natively, plus the listing and the JSON files); times are
// reported (test-output/cdn.txt), not asserted.
func TestLargeRepoCDNOnAnotherOrigin(t *testing.T) {
	dir := t.TempDir()
	const repo = "bench/DeepSeek-R1-FP4-shape"
	const shards = 80
	if _, _, err := synth.WriteDeepSeekR1FP4Shape(filepath.Join(dir, repo), shards); err != nil {
		t.Fatal(err)
	}
	hubLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cdnLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, err := localhub.New(dir, localhub.Options{Latency: 50 * time.Millisecond, CDN: "http://" + cdnLn.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range []net.Listener{hubLn, cdnLn} {
		srv := &http.Server{Handler: h}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	hubURL := "http://" + hubLn.Addr().String()
	base := serve(t) // the page alone, on its own origin
	ctx := newBrowser(t, 1366, 900)

	h.ResetStats()
	do(t, ctx, chromedp.Navigate(pageURL(base, repo, "")+"&endpoint="+url.QueryEscape(hubURL)))
	waitJS(t, ctx, fmt.Sprintf("document.body.dataset.loaded === %q", repo), 3*time.Minute)
	pageReq, pageBytes := h.Stats()
	type marks struct{ Open, Headers, Rendered float64 }
	m := eval[marks](t, ctx, `(() => { const g = n => (performance.getEntriesByName(n)[0] || {startTime: NaN}).startTime; return {Open: g("qs-open"), Headers: g("qs-headers-done"), Rendered: g("qs-rendered")}; })()`)
	if n := eval[int](t, ctx, `Number(document.getElementById("sum-tensors").dataset.value)`); n != synth.DeepSeekR1FP4Tensors {
		t.Fatalf("%d tensors on screen, want %d", n, synth.DeepSeekR1FP4Tensors)
	}

	h.ResetStats()
	cmd := exec.Command(filepath.Join(binDir, "quantscope"), "inspect", "--json", "--endpoint", hubURL, repo)
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("inspect: %v", err)
	}
	native := time.Since(t0)
	nativeReq, nativeBytes := h.Stats()
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()

	headers := time.Duration((m.Headers - m.Open) * float64(time.Millisecond))
	report := fmt.Sprintf("80-shard repo (180,364 tensors), hub + CDN on two origins, 50 ms a response, page on a third origin:\n"+
		"  page (headless Chromium): %d requests, %d bytes; open → last header %.2f s, → inventory on screen %.2f s\n"+
		"  quantscope inspect --json: %d requests, %d bytes; %.2f s wall, %.2f s CPU (user + sys)\n"+
		"  page headers phase / native inspect = %.2f×\n",
		pageReq, pageBytes, headers.Seconds(), (m.Rendered-m.Open)/1000, nativeReq, nativeBytes, native.Seconds(), cpu.Seconds(), headers.Seconds()/native.Seconds())
	type entry struct {
		Name string
		At   float64
	}
	for _, e := range eval[[]entry](t, ctx, `performance.getEntriesByType("mark").filter(m => m.name.startsWith("qs-engine-")).map(m => ({Name: m.name.slice(10), At: m.startTime}))`) {
		report += fmt.Sprintf("    page engine phase %-16s at %6.0f ms\n", e.Name, e.At-m.Open)
	}
	t.Log(report)
	os.WriteFile(filepath.Join(outDir, "cdn.txt"), []byte(report), 0o644)
	// The listing, config.json, hf_quant_config.json, the index, and per
	// shard the 302 and the header read at the CDN.
	if want := int64(4 + 2*shards); pageReq > want || nativeReq > want {
		t.Errorf("page %d requests, native %d; want at most %d (2 a shard)", pageReq, nativeReq, want)
	}
}
