package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/quantscope/quantscope/synth"
)

// The module panel as a newcomer meets it: value-ordered codes with a count
// axis, MXFP4 scales as E8M0 values, dense modules said to be dense, the
// sample's own cost, GPTQ columns paged, the module's own findings, a panel
// that covers neither the findings nor its own width.
func TestNewcomerPanel(t *testing.T) {
	base := serve(t, "--demo")
	ctx := newBrowser(t, 1366, 900)
	open := func(repo, module string) {
		t.Helper()
		do(t, ctx, chromedp.Navigate(pageURL(base, repo, module)))
		waitJS(t, ctx, fmt.Sprintf("document.getElementById('sample').dataset.ready === %q", module+":0"), 60*time.Second)
	}

	// NVFP4: the 16 E2M1 codes in value order, -0 before 0; a count axis.
	open(synth.Org+"/Llama-tiny-NVFP4", "model.layers.1.mlp.down_proj")
	if got := eval[string](t, ctx, `document.getElementById("codes").dataset.labels`); got != "-6 -4 -3 -2 -1.5 -1 -0.5 -0 0 0.5 1 1.5 2 3 4 6" {
		t.Errorf("E2M1 codes in the order %q", got)
	}
	maxShown := eval[string](t, ctx, `document.getElementById("codes").dataset.max`)
	if n, err := strconv.Atoi(maxShown); err != nil || n <= 0 {
		t.Errorf("the code plot has no count axis (max %q)", maxShown)
	}
	stats := eval[string](t, ctx, `document.getElementById("sample-stats").textContent`)
	if !strings.Contains(stats, "this sample fetched") || !strings.Contains(stats, "this session") {
		t.Errorf("sample cost: %q", stats)
	}
	if !eval[bool](t, ctx, `document.getElementById("codes-fig").hidden === false && document.getElementById("scales-fig").hidden === false`) {
		t.Error("a quantized module's code or scale plot is hidden")
	}

	// MXFP4: the block scales are 2^(e−127), so on the log2 axis they sit
	// well below 2^0 for weights near 0.02 (the raw bytes would be near 2^7).
	open(synth.Org+"/gpt-oss-tiny-MXFP4", "model.layers.0.mlp.experts.down_proj")
	type hist struct {
		Lo, Hi float64
		Counts []int
		Log2   bool
	}
	// stacked experts: the rows say which expert they are
	if got := eval[string](t, ctx, `document.getElementById("sample-stats").textContent`); !strings.HasPrefix(got, "expert 0, rows 0–3 (rows 0–3 of 8 × 256) × all 512 columns") {
		t.Errorf("expert rows: %q", got)
	}
	sh, err := chromedp.Run(ctx, chromedp.Evaluate[hist](`quantscope.sample("model.layers.0.mlp.experts.down_proj", 0, 4).then(r => JSON.parse(r.json).scale_histogram)`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if !sh.Log2 || sh.Hi >= 0 || sh.Lo < -20 || len(sh.Counts) == 0 {
		t.Errorf("MXFP4 scales on the log2 axis span 2^%v…2^%v", sh.Lo, sh.Hi)
	}
	// gpt-oss experts: the parameters say they include the bias.
	if got := eval[string](t, ctx, `document.getElementById("mod-parameters").textContent`); got != "1,050,624 (weight 1,048,576 + bias 2,048)" {
		t.Errorf("experts parameters: %q", got)
	}

	// A dense module: no empty code plot, no made-up scale axis, a note.
	open(synth.Org+"/gpt-oss-tiny-MXFP4", "model.layers.0.self_attn.q_proj")
	note := eval[string](t, ctx, `document.getElementById("plots-note").hidden ? "" : document.getElementById("plots-note").textContent`)
	if !eval[bool](t, ctx, `document.getElementById("codes-fig").hidden && document.getElementById("scales-fig").hidden`) || !strings.Contains(note, "dense (bf16): no codes, no scales") {
		t.Errorf("dense module: plots shown or note %q", note)
	}

	// GPTQ: page the columns past the first 256, and the grid holds the
	// decoded values of those columns.
	mod := "model.layers.0.mlp.down_proj"
	repo := synth.Org + "/Llama-tiny-GPTQ-Int4"
	open(repo, mod)
	for range 6 {
		do(t, ctx, chromedp.Click(chromedp.CSS("#cols-next")))
		time.Sleep(50 * time.Millisecond)
	}
	waitJS(t, ctx, `document.querySelector("#sample-table tr th:nth-child(2)").textContent === "288"`, 30*time.Second)
	var dec struct{ Values []float64 }
	if err := json.Unmarshal(quantscope(t, "decode", "--json", "--endpoint", base, "--rows", "0:1", repo, mod), &dec); err != nil {
		t.Fatal(err)
	}
	row := eval[[]string](t, ctx, `[...document.querySelectorAll("#sample-table tr")[1].querySelectorAll("td")].map(td => td.dataset.v)`)
	for j, v := range row {
		f, _ := strconv.ParseFloat(v, 64)
		if float32(f) != float32(dec.Values[288+j]) {
			t.Fatalf("column %d: page %s, decode %v", 288+j, v, dec.Values[288+j])
		}
	}
	if got := eval[string](t, ctx, `document.getElementById("sample-cols").textContent`); !strings.HasPrefix(got, "shown: columns 288–335 of ") {
		t.Errorf("columns note %q", got)
	}
	// the statistics say they cover the decoded columns, not the whole rows
	if got := eval[string](t, ctx, `document.getElementById("sample-stats").textContent`); !strings.Contains(got, "rows 0–3 × columns 288–543 of 768 (") {
		t.Errorf("the statistics do not say which columns they cover: %q", got)
	}
	if tops := eval[[]float64](t, ctx, `["cols-prev", "cols-next"].map(id => document.getElementById(id).getBoundingClientRect().top)`); tops[0] != tops[1] {
		t.Errorf("the column pager's ◀ and ▶ sit on different lines: %v", tops)
	}
	shot(t, ctx, "newcomer-gptq-columns")

	// The mislabeled repo: the module's own finding in the panel, and the
	// panel beside the findings, not over them; its tensor table fits.
	open(synth.Org+"/Llama-tiny-FP4-mislabeled", "model.layers.0.self_attn.q_proj")
	if !eval[bool](t, ctx, `!!document.querySelector('#panel-findings li[data-rule="config-excludes-quantized"]')`) {
		t.Error("the panel does not show the module's finding")
	}
	if eval[bool](t, ctx, `document.getElementById("findings").getBoundingClientRect().right > document.getElementById("panel").getBoundingClientRect().left`) {
		t.Error("the panel covers the findings")
	}
	if w := eval[[]int](t, ctx, `(() => { const p = document.getElementById("panel"); return [p.scrollWidth, p.clientWidth]; })()`); w[0] > w[1] {
		t.Errorf("the panel overflows its width: %v", w)
	}
	shot(t, ctx, "newcomer-panel")
}

// The module table as a newcomer meets it: as tall as its rows (up to most
// of the window), no truncated kind, numeric columns sorted largest first
// on the first click, and bars whose colours never mean two things.
func newcomerTable(t *testing.T, base string, ctx context.Context) {
	repo := synth.Org + "/gpt-oss-tiny-MXFP4"
	openRepo(t, ctx, base, repo)
	sz := eval[[]int](t, ctx, `(() => { const e = document.getElementById("table"); return [e.scrollHeight, e.clientHeight, document.querySelectorAll("#table .r").length, window.innerHeight]; })()`)
	if sz[0] > sz[1]+1 && sz[1] < sz[3]*3/4 {
		t.Errorf("the table scrolls (%d in %d px) though the window has room (%d px)", sz[0], sz[1], sz[3])
	}
	if n := eval[int](t, ctx, `[...document.querySelectorAll("#table .r")].filter(r => r.style.display !== "none").map(r => r.children[2]).filter(c => c.scrollWidth > c.clientWidth).length`); n > 0 {
		t.Errorf("%d kind cells truncated", n)
	}
	do(t, ctx, chromedp.Click(chromedp.CSS(`#table .head [data-key="bytes"]`)))
	order := eval[[]float64](t, ctx, `[...document.querySelectorAll("#table .r")].filter(r => r.style.display !== "none").sort((a, b) => Number(a.dataset.idx) - Number(b.dataset.idx)).map(r => state.table.view[Number(r.dataset.idx)].bytes)`)
	if eval[string](t, ctx, `document.querySelector('#table .head [data-key="bytes"]').getAttribute("aria-sort")`) != "descending" {
		t.Error("the first click on bytes does not sort descending")
	}
	for i := 1; i < len(order); i++ {
		if order[i] > order[i-1] {
			t.Fatalf("bytes not descending: %v", order)
		}
	}
	do(t, ctx, chromedp.Click(chromedp.CSS(`#table .head [data-key="name"]`)))
	if eval[string](t, ctx, `document.querySelector('#table .head [data-key="name"]').getAttribute("aria-sort")`) != "ascending" {
		t.Error("the first click on a text column does not sort ascending")
	}
	// The two bars: the colours of the kinds are none of the formats'.
	clash := eval[[]string](t, ctx, `(() => {
		const rgb = c => { const e = document.createElement("i"); e.style.color = c; document.body.append(e); const v = getComputedStyle(e).color; e.remove(); return v; };
		const stacks = document.querySelectorAll("#bars-body .stack");
		const f = new Set([...stacks[0].children].map(s => rgb(s.dataset.color)));
		return [...stacks[1].children].map(s => rgb(s.dataset.color)).filter(c => f.has(c));
	})()`)
	if len(clash) > 0 {
		t.Errorf("the kind bar reuses format colours %v", clash)
	}
	// parameters include biases, and the summary says how many.
	if got := eval[string](t, ctx, `document.getElementById("sum-parameters").textContent`); !strings.Contains(got, "in biases") {
		t.Errorf("summary parameters: %q", got)
	}
	shot(t, ctx, "newcomer-table")
}

// startHub runs `quantscope hub` on dir and returns its URL.
func startHub(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "quantscope"), "hub", "--addr", "127.0.0.1:0", dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	buf := make([]byte, 4096)
	var got string
	for !strings.Contains(got, "\n") {
		n, err := out.Read(buf)
		if err != nil {
			t.Fatalf("hub printed %q: %v", got, err)
		}
		got += string(buf[:n])
	}
	i := strings.Index(got, " on http://")
	if i < 0 {
		t.Fatalf("hub printed %q", got)
	}
	return strings.TrimSpace(strings.SplitN(got[i+4:], "\n", 2)[0])
}

// A deep link's endpoint survives loading and reloading; a 245-entry
// exclusion list reads as a few layer patterns, every entry on request.
func newcomerEndpointAndScheme(t *testing.T, base string, ctx context.Context) {
	dir := t.TempDir()
	r := synth.Mislabeled()
	id := "elsewhere/" + strings.TrimPrefix(r.ID, synth.Org+"/")
	p := filepath.Join(dir, filepath.FromSlash(id))
	if err := r.WriteDir(p); err != nil {
		t.Fatal(err)
	}
	var ex []string
	for i := range 61 {
		ex = append(ex, fmt.Sprintf("model.layers.%d.self_attn*", i))
		if i >= 3 {
			ex = append(ex, fmt.Sprintf("model.layers.%d.mlp.gate", i))
		}
		ex = append(ex, fmt.Sprintf("model.layers.%d.input_layernorm", i), fmt.Sprintf("model.layers.%d.post_attention_layernorm", i))
	}
	ex = append(ex, "model.norm", "model.embed_tokens", "lm_head", "model.layers.61*")
	cfg, _ := json.Marshal(map[string]any{"producer": map[string]any{"name": "modelopt", "version": "0.27.1"},
		"quantization": map[string]any{"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ex}})
	if err := os.WriteFile(filepath.Join(p, "hf_quant_config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	hub := startHub(t, dir)
	link := pageURL(base, id, "") + "&endpoint=" + hub
	do(t, ctx, chromedp.Navigate(link))
	waitJS(t, ctx, fmt.Sprintf("document.body.dataset.loaded === %q", id), 60*time.Second)
	for range 2 {
		if got := eval[string](t, ctx, `new URLSearchParams(location.search).get("endpoint")`); got != hub {
			t.Fatalf("the URL's endpoint is %q, want %q", got, hub)
		}
		do(t, ctx, chromedp.Reload())
		waitJS(t, ctx, fmt.Sprintf("document.body.dataset.loaded === %q && document.getElementById('error').hidden", id), 60*time.Second)
	}
	h := eval[float64](t, ctx, `document.getElementById("scheme").getBoundingClientRect().height`)
	text := eval[string](t, ctx, `document.getElementById("scheme-exclude_modules").textContent`)
	if h > 500 || !strings.Contains(text, "model.layers.N.self_attn* (N in 0–60: 61)") || strings.Contains(text, "model.layers.37.self_attn*") {
		t.Errorf("scheme card %.0f px high: %q", h, text)
	}
	do(t, ctx, chromedp.Click(chromedp.CSS("#scheme-expand-exclude_modules")))
	if text := eval[string](t, ctx, `document.getElementById("scheme-exclude_modules").textContent`); !strings.Contains(text, "model.layers.37.self_attn*") {
		t.Errorf("expanded: %q", text)
	}
	shot(t, ctx, "newcomer-scheme")
}

// The gated demo's token is on the demo list, the error card's advice is the
// page's (no CLI flags), the icon costs no request and nothing answers 404.
func newcomerGatedAndIcon(t *testing.T, base string, ctx context.Context) {
	do(t, ctx, chromedp.Navigate(base+"/"))
	waitJS(t, ctx, `!document.getElementById("demos").hidden`, 60*time.Second)
	if list := eval[string](t, ctx, `document.getElementById("demo-list").innerText`); !strings.Contains(list, "hf_quantscope_demo") {
		t.Errorf("the demo list does not show the token: %q", list)
	}
	if !eval[bool](t, ctx, `document.querySelector('link[rel="icon"]').href.startsWith("data:image/svg+xml")`) {
		t.Error("no icon link")
	}
	repo := synth.Org + "/Llama-tiny-NVFP4-gated"
	do(t, ctx, chromedp.Navigate(pageURL(base, repo, "")))
	waitJS(t, ctx, `document.getElementById("error").dataset.kind === "auth"`, 60*time.Second)
	card := eval[string](t, ctx, `document.getElementById("error").innerText`)
	if strings.Contains(card, "--token") || strings.Contains(card, "HF_TOKEN") || !strings.Contains(card, "Settings") || !strings.Contains(card, "hf_quantscope_demo") {
		t.Errorf("gated error card: %q", card)
	}
	// The hub's X-Error-Code reaches the page (exposed to CORS, as the hub
	// does), so the detail says gated, not "repository not found".
	if msg := eval[string](t, ctx, `document.getElementById("error-message").textContent`); !strings.Contains(msg, "the repo is gated") || strings.Contains(msg, "not found") {
		t.Errorf("gated error detail: %q", msg)
	}
}

// The report as a newcomer meets it, in one browser against one server (the
// page tests are the slow part of make test): the table, the deep link's
// endpoint and the scheme card, the gated repo and the icon; no request of
// the page's own answers 4xx or 5xx but the gated repo's.
func TestNewcomerReport(t *testing.T) {
	base := serve(t, "--demo")
	ctx := newBrowser(t, 1366, 900)
	var mu sync.Mutex
	var bad []string
	chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventResponseReceived); ok && e.Response.Status >= 400 && !strings.Contains(e.Response.URL, "gated") {
			mu.Lock()
			bad = append(bad, fmt.Sprintf("%d %s", e.Response.Status, e.Response.URL))
			mu.Unlock()
		}
	})
	t.Run("table", func(t *testing.T) { newcomerTable(t, base, ctx) })
	t.Run("endpoint-and-scheme", func(t *testing.T) { newcomerEndpointAndScheme(t, base, ctx) })
	t.Run("gated-and-icon", func(t *testing.T) { newcomerGatedAndIcon(t, base, ctx) })
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("failed requests: %v", bad)
	}
}
