package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/synth"
)

const heavyModule = "model.layers.0.mlp.down_proj"

// clickHeavy clicks one of the panel's companion buttons and waits for its
// job to end; it returns the state the panel shows (done, error, cancelled).
func clickHeavy(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	eval[bool](t, ctx, `(document.getElementById("heavy").dataset.state = "", document.getElementById(`+jsQuote(id)+`).click(), true)`)
	waitJS(t, ctx, `["done", "error", "cancelled"].includes(document.getElementById("heavy").dataset.state)`, 120*time.Second)
	return eval[string](t, ctx, `document.getElementById("heavy").dataset.state`)
}

// shownValues reads the data-v of every cell with a data-key under sel.
func shownValues(t *testing.T, ctx context.Context, sel string) map[string]json.RawMessage {
	t.Helper()
	s := eval[string](t, ctx, `JSON.stringify(Object.fromEntries([...document.querySelectorAll(`+jsQuote(sel+" [data-key]")+`)].map(e => [e.dataset.key, JSON.parse(e.dataset.v)])))`)
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The module panel's companion operations against a real `serve --demo`:
// what the page shows equals what the command line prints for the same
// module, and the quantized file it downloads is the command line's file.
func TestHeavyOps(t *testing.T) {
	outDir := t.TempDir()
	base, token := serveToken(t, "--demo", "--out-dir", outDir)
	c := newBrowser(t, 1366, 1400)
	dl := t.TempDir()
	if _, err := chromedp.CallBrowser(c, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dl}); err != nil {
		t.Fatal(err)
	}
	repo := synth.Org + "/Llama-tiny-NVFP4"
	do(t, c, chromedp.Navigate(base+"/?token="+token+"&source="+repo+"&module="+heavyModule))
	waitJS(t, c, "companion.connected() && document.body.dataset.loaded === "+jsQuote(repo), 60*time.Second)
	waitJS(t, c, `!document.getElementById("heavy-actions").hidden && document.getElementById("heavy-hint").hidden`, 10*time.Second)

	// Full statistics: every number shown is the command line's.
	if st := clickHeavy(t, c, "heavy-stats"); st != "done" {
		t.Fatalf("stats ended %s: %s", st, eval[string](t, c, `document.getElementById("heavy-status").textContent`))
	}
	var cli map[string]json.RawMessage
	json.Unmarshal(quantscope(t, "stats", "--json", "--endpoint", base, repo, heavyModule), &cli)
	shown := shownValues(t, c, "#stats-table")
	for _, k := range []string{"min", "max", "mean", "std", "nan", "inf", "at_max_fraction", "scale_at_max_fraction", "scale_subnormal_fraction", "bytes_read"} {
		if !jsonEqual(shown[k], cli[k]) {
			t.Errorf("stats %s: page %s, quantscope stats %s", k, shown[k], cli[k])
		}
	}
	if _, ok := shown["seconds"]; !ok {
		t.Error("no seconds shown")
	}
	var hist struct{ Histogram, ScaleHistogram struct{ Counts []int64 } }
	b, _ := json.Marshal(map[string]json.RawMessage{"Histogram": cli["histogram"], "ScaleHistogram": cli["scale_histogram"]})
	json.Unmarshal(b, &hist)
	for canvas, want := range map[string][]int64{"stats-hist": hist.Histogram.Counts, "stats-scales": hist.ScaleHistogram.Counts} {
		got := eval[string](t, c, `document.getElementById(`+jsQuote(canvas)+`).dataset.counts`)
		if got != joinInts(want) || len(want) == 0 {
			t.Errorf("%s drew counts %s, quantscope stats has %v", canvas, got, want)
		}
	}
	elemShot(t, c, "#heavy", "heavy-stats")

	// The recipe report, on a BF16 module (the NVFP4 one was made by max, so
	// mse finds max's scales again): the table is the command line's, and
	// each map marks as many blocks as the share of blocks changed says.
	const dense = "lm_head"
	eval[bool](t, c, `(selectModule(`+jsQuote(dense)+`), true)`)
	waitJS(t, c, `document.getElementById("panel-title").textContent === `+jsQuote(dense)+` && !document.getElementById("heavy-stats").disabled`, 10*time.Second)
	if st := clickHeavy(t, c, "heavy-report"); st != "done" {
		t.Fatalf("report ended %s", st)
	}
	var rep struct {
		Shape   []int
		Recipes []map[string]json.RawMessage
	}
	json.Unmarshal(quantscope(t, "report", "--json", "--endpoint", base, repo, dense), &rep)
	for _, r := range rep.Recipes {
		var name string
		json.Unmarshal(r["recipe"], &name)
		got := shownValues(t, c, `#report-table tr[data-recipe="`+name+`"]`)
		for _, k := range []string{"mse", "sqnr_db", "max_abs_err", "blocks_changed"} {
			if !jsonEqual(got[k], r[k]) {
				t.Errorf("report %s %s: page %s, quantscope report %s", name, k, got[k], r[k])
			}
		}
		if name == "mse" || name == "least_squares" {
			var share float64
			json.Unmarshal(r["blocks_changed"], &share)
			marked := eval[string](t, c, `document.getElementById("blockmap-`+name+`").dataset.marked`)
			want := int(math.Round(share * float64(rep.Shape[0]*rep.Shape[1]/16)))
			if marked != strconv.Itoa(want) || (name == "mse" && want == 0) {
				t.Errorf("%s map marks %s blocks, the report's share is %d blocks", name, marked, want)
			}
		}
	}
	// An exact recipe's bar is full and marked so; a finite one stops short
	// of it (at 85%), so 33 dB never reads as exact.
	bars := eval[[]map[string]any](t, c, `[...document.querySelectorAll("#report-table .sqnr-bar")].map(b => ({ exact: b.classList.contains("exact"), w: parseFloat(b.style.width) }))`)
	anyExact := false
	for _, b := range bars {
		anyExact = anyExact || b["exact"] == true
	}
	for i, b := range bars {
		if w := b["w"].(float64); (b["exact"] == true && w != 100) || (b["exact"] != true && anyExact && w > 85) {
			t.Errorf("bar %d: %v (an exact one among them: %v)", i, b, anyExact)
		}
	}
	elemShot(t, c, "#heavy", "heavy-report")

	// Quantize…: the downloaded file is byte for byte the command line's.
	want := filepath.Join(t.TempDir(), "cli.safetensors")
	quantscope(t, "quantize", "--format", "nvfp4", "--recipe", "mse", "--naming", "compressed-tensors", "--out", want, "--endpoint", base, repo, dense)
	wantB, _ := os.ReadFile(want)
	eval[bool](t, c, `(document.getElementById("heavy-quantize").click(), document.getElementById("q-recipe").value = "mse", document.getElementById("q-naming").value = "compressed-tensors", true)`)
	if st := clickHeavy(t, c, "q-run"); st != "done" {
		t.Fatalf("quantize ended %s: %s", st, eval[string](t, c, `document.getElementById("heavy-status").textContent`))
	}
	name := eval[string](t, c, `(document.getElementById("quantize-download").click(), document.getElementById("quantize-download").download)`)
	got := waitFile(t, filepath.Join(dl, name))
	if len(wantB) == 0 || !bytes.Equal(got, wantB) {
		t.Fatalf("downloaded %s (%d bytes) differs from quantscope quantize's file (%d bytes)", name, len(got), len(wantB))
	}
	shot(t, c, "heavy-quantize")
	// The same, FP8 with 16×32 blocks, written on the companion's machine
	// under its --out-dir; a path out of it is refused, naming the rule.
	quantscope(t, "quantize", "--format", "fp8_e4m3", "--block", "16,32", "--out", want, "--endpoint", base, repo, dense)
	wantB, _ = os.ReadFile(want)
	eval[bool](t, c, `(document.getElementById("q-format").value = "fp8_e4m3", document.getElementById("q-format").dispatchEvent(new Event("change")),
		document.getElementById("q-scale").value = "block", document.getElementById("q-scale").dispatchEvent(new Event("change")),
		document.getElementById("q-block").value = "16,32", document.getElementById("q-path").value = "fp8.safetensors", true)`)
	if st := clickHeavy(t, c, "q-run"); st != "done" {
		t.Fatalf("quantize to a path ended %s", st)
	}
	if p := eval[string](t, c, `document.getElementById("quantize-written").dataset.path`); p != filepath.Join(outDir, "fp8.safetensors") {
		t.Errorf("written at %q", p)
	}
	if got, _ := os.ReadFile(filepath.Join(outDir, "fp8.safetensors")); len(wantB) == 0 || !bytes.Equal(got, wantB) {
		t.Errorf("the written FP8 file (%d bytes) differs from quantscope quantize's (%d bytes)", len(got), len(wantB))
	}
	eval[bool](t, c, `(document.getElementById("q-path").value = "../escape.safetensors", true)`)
	if st := clickHeavy(t, c, "q-run"); st != "error" {
		t.Fatalf("a path out of --out-dir ended %s", st)
	}
	if s := eval[string](t, c, `document.getElementById("heavy-status").textContent`); !strings.HasPrefix(s, "error: ") || !strings.Contains(s, "quantize-path") {
		t.Errorf("status %q", s)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(outDir), "escape.safetensors")); err == nil {
		t.Error("written out of --out-dir")
	}

	// A module without a 2-D weight (a norm) offers full statistics only.
	eval[bool](t, c, `(selectModule("model.norm"), true)`)
	waitJS(t, c, `document.getElementById("panel-title").textContent === "model.norm"`, 10*time.Second)
	if v := eval[string](t, c, `["heavy-stats", "heavy-report", "heavy-quantize"].map(id => document.getElementById(id).disabled).join(" ")`); v != "false true true" {
		t.Errorf("on a 1-D module, disabled: %s", v)
	}

	// Without a companion the buttons are absent and the hint says how.
	do(t, c, chromedp.Navigate(base+"/?source="+repo+"&module="+heavyModule))
	waitJS(t, c, "document.body.dataset.loaded === "+jsQuote(repo)+` && document.getElementById("panel-title").textContent === `+jsQuote(heavyModule), 60*time.Second)
	if v := eval[string](t, c, `(() => { const a = document.getElementById("heavy-actions"), h = document.getElementById("heavy-hint"); return a.hidden + " " + a.offsetParent + " " + h.hidden + " " + h.textContent; })()`); !strings.HasPrefix(v, "true null false") || !strings.Contains(v, "quantscope serve") {
		t.Errorf("without a companion: %s", v)
	}
}

// Cancel stops a running recipe report on a 2048×4096 dense module (a few
// seconds of mse sweep): the panel says cancelled, and the companion's only
// job slot (--max-jobs 1) is free for the next job.
func TestHeavyCancel(t *testing.T) {
	hub := t.TempDir()
	const rows, cols = 2048, 4096
	rng := rand.New(rand.NewPCG(8, 8))
	w := make([]byte, 4*rows*cols)
	for i := 0; i < rows*cols; i++ {
		binary.LittleEndian.PutUint32(w[4*i:], math.Float32bits(float32(rng.NormFloat64()*0.02)))
	}
	data, err := safetensors.Encode([]safetensors.WriteTensor{{Name: heavyModule + ".weight", DType: safetensors.F32, Shape: []uint64{rows, cols}, Data: w}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	repo := "quantscope-test/Big-dense"
	dir := filepath.Join(hub, filepath.FromSlash(repo))
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "model.safetensors"), data, 0o644)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama"}`), 0o644)
	base, token := serveToken(t, "--hub", hub, "--max-jobs", "1")
	c := newBrowser(t, 1366, 900)
	do(t, c, chromedp.Navigate(base+"/?token="+token+"&source="+repo+"&module="+heavyModule))
	waitJS(t, c, "companion.connected() && document.body.dataset.loaded === "+jsQuote(repo), 60*time.Second)
	waitJS(t, c, `!document.getElementById("heavy-actions").hidden`, 10*time.Second)
	eval[bool](t, c, `(document.getElementById("heavy-report").click(), true)`)
	// Cancel in the mse sweep: the report reads the weight (the first fifth
	// of its progress), runs max (the next fifth), then mse, four_six and
	// least_squares, seconds of work left.
	waitJS(t, c, `(() => { const b = document.getElementById("heavy-progress"), v = Number(b.getAttribute("aria-valuenow"));
		return /^recipe report: \d+ %/.test(b.querySelector(".label").textContent) && v >= 41; })()`, 60*time.Second)
	if v := eval[float64](t, c, `Number(document.getElementById("heavy-progress").getAttribute("aria-valuenow"))`); v >= 60 {
		t.Fatalf("the report was %v%% done before the cancel: the module is too small to test it", v)
	}
	if eval[bool](t, c, `document.getElementById("heavy-stats").disabled === false`) {
		t.Error("a second job can be started while one runs")
	}
	shot(t, c, "heavy-running")
	eval[bool](t, c, `(document.getElementById("heavy-cancel").click(), true)`)
	waitJS(t, c, `document.getElementById("heavy").dataset.state === "cancelled"`, 5*time.Second)
	if s := eval[string](t, c, `document.getElementById("heavy-status").textContent + "|" + document.getElementById("heavy-job").hidden`); s != "recipe report: cancelled|true" {
		t.Errorf("after cancel: %q", s)
	}
	// The op stops at its next context check (the companion promises 100 ms;
	// the report had seconds left); then the only slot takes the next job.
	time.Sleep(time.Second)
	if st := clickHeavy(t, c, "heavy-stats"); st != "done" {
		t.Fatalf("the job after the cancelled one ended %s: %s", st, eval[string](t, c, `document.getElementById("heavy-status").textContent`))
	}
	// Closing the module panel cancels its running job: the only slot is
	// free again for a job on the reopened panel.
	eval[bool](t, c, `(document.getElementById("heavy-report").click(), true)`)
	waitJS(t, c, `Number(document.getElementById("heavy-progress").getAttribute("aria-valuenow")) >= 41`, 60*time.Second)
	eval[bool](t, c, `(document.getElementById("panel-close").click(), true)`)
	waitJS(t, c, `["done", "error", "cancelled"].includes(document.getElementById("heavy").dataset.state)`, 60*time.Second)
	if st := eval[string](t, c, `document.getElementById("heavy").dataset.state`); st != "cancelled" {
		t.Errorf("the report running when the panel closed ended %s, want cancelled", st)
	}
	eval[bool](t, c, `(openModule(`+jsQuote(heavyModule)+`, true), true)`)
	waitJS(t, c, `!document.getElementById("panel").hidden && !document.getElementById("heavy-actions").hidden`, 10*time.Second)
	if st := clickHeavy(t, c, "heavy-stats"); st != "done" {
		t.Fatalf("the job after closing the panel on a running one ended %s: %s", st, eval[string](t, c, `document.getElementById("heavy-status").textContent`))
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func joinInts(v []int64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(int(x))
	}
	return strings.Join(s, ",")
}

// waitFile waits for a finished download.
func waitFile(t *testing.T, p string) []byte {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(p + ".crdownload"); err == nil {
			continue
		}
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
			return b
		}
	}
	ents, _ := os.ReadDir(filepath.Dir(p))
	t.Fatalf("no download at %s (folder holds %v)", p, ents)
	return nil
}

// elemShot scrolls the element to the top of the panel and saves the
// viewport under test-output/.
func elemShot(t *testing.T, ctx context.Context, sel, name string) {
	eval[bool](t, ctx, `(document.querySelector(`+jsQuote(sel)+`).scrollIntoView(), true)`)
	time.Sleep(200 * time.Millisecond) // a frame for the canvases
	buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(outDir, name+".png")
	if err := os.WriteFile(p, buf, 0o644); err == nil {
		t.Logf("screenshot: %s", p)
	}
}
