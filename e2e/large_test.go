package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/quantscope/quantscope/synth"
)

// The 80-shard repo of the hub bench (nvidia/DeepSeek-R1-FP4's 180,364
// tensors): how long the inventory takes to reach the screen after the last
// header arrives, and how long frames take while the full tensor table
// scrolls. Both are measured with the Performance API and reported (in the
// log and test-output/perf.txt), not asserted: the machines are noisy.
func TestLargeRepoFigures(t *testing.T) {
	dir := t.TempDir()
	const repo = "bench/DeepSeek-R1-FP4-shape"
	if _, _, err := synth.WriteDeepSeekR1FP4Shape(filepath.Join(dir, repo), 80); err != nil {
		t.Fatal(err)
	}
	base := serve(t, "--hub", dir)
	ctx := newBrowser(t, 1366, 900)
	t0 := time.Now()
	do(t, ctx, chromedp.Navigate(pageURL(base, repo, "")))
	waitJS(t, ctx, fmt.Sprintf("document.body.dataset.loaded === %q", repo), 3*time.Minute)
	wall := time.Since(t0)
	type marks struct{ Open, Headers, Engine, Parsed, Rendered float64 }
	m := eval[marks](t, ctx, `(() => { const g = n => (performance.getEntriesByName(n)[0] || {startTime: NaN}).startTime; return {Open: g("qs-open"), Headers: g("qs-headers-done"), Engine: g("qs-engine-done"), Parsed: g("qs-parsed"), Rendered: g("qs-rendered")}; })()`)
	tensors := eval[int](t, ctx, `Number(document.getElementById("sum-tensors").dataset.value)`)
	if tensors != synth.DeepSeekR1FP4Tensors {
		t.Fatalf("%d tensors on screen, want %d", tensors, synth.DeepSeekR1FP4Tensors)
	}
	do(t, ctx, chromedp.Click(chromedp.CSS("#show-tensors")))
	waitJS(t, ctx, `document.getElementById("modules-count").textContent.includes("180,364 tensors")`, time.Minute)
	type frames struct {
		N                int
		Max, P95, Median float64
		Scrolled         float64
	}
	f, err := chromedp.Run(ctx, chromedp.Evaluate[frames](`new Promise(resolve => {
		const el = document.getElementById("table");
		const d = []; let last = performance.now(), n = 0;
		const step = now => {
			d.push(now - last); last = now;
			el.scrollTop += 1500;
			if (++n < 240 && el.scrollTop + el.clientHeight < el.scrollHeight) requestAnimationFrame(step);
			else {
				d.shift();
				const s = [...d].sort((a, b) => a - b);
				resolve({N: d.length, Max: s[s.length - 1], P95: s[Math.floor(s.length * 0.95)], Median: s[Math.floor(s.length / 2)], Scrolled: el.scrollTop});
			}
		};
		requestAnimationFrame(step);
	})`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	shot(t, ctx, "large-repo-tensors")
	report := fmt.Sprintf("80-shard repo, 180,364 tensors, local hub, headless Chromium:\n"+
		"  open → last header: %.0f ms; last header → inventory on screen: %.0f ms; whole page load as seen by the test: %.1f s\n"+
		"  scrolling the tensor table (%d frames, %.0f px): median frame %.1f ms, p95 %.1f ms, max %.1f ms\n",
		m.Headers-m.Open, m.Rendered-m.Headers, wall.Seconds(), f.N, f.Scrolled, f.Median, f.P95, f.Max)
	report += fmt.Sprintf("  after the last header: engine %.0f ms, JSON.parse %.0f ms, rendering %.0f ms\n", m.Engine-m.Headers, m.Parsed-m.Engine, m.Rendered-m.Parsed)
	type entry struct {
		Name string
		At   float64
	}
	for _, e := range eval[[]entry](t, ctx, `performance.getEntriesByType("mark").filter(m => m.name.startsWith("qs-engine-")).map(m => ({Name: m.name.slice(10), At: m.startTime}))`) {
		report += fmt.Sprintf("    engine phase %-18s at %6.0f ms (%+6.0f ms from the last header)\n", e.Name, e.At-m.Open, e.At-m.Headers)
	}
	t.Log(report)
	os.WriteFile(filepath.Join(outDir, "perf.txt"), []byte(report), 0o644)
	if f.N < 10 {
		t.Fatalf("only %d frames measured", f.N)
	}
}
