package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/quantscope/quantscope/synth"
)

type fitDoc struct {
	PerGPUWeightBytes uint64 `json:"per_gpu_weight_bytes"`
	PerGPUKVBytes     uint64 `json:"per_gpu_kv_bytes"`
	KVBytesPerToken   uint64 `json:"kv_bytes_per_token"`
	Context           int
	TP                int
	GPUs              []struct {
		Name       string
		Count      int
		Fits       bool
		MaxContext int `json:"max_context"`
	}
}

// fitOnScreen reads the card's numbers.
const fitOnScreen = `(() => {
  const v = id => Number(document.getElementById(id).dataset.value);
  return JSON.stringify({ per_gpu_weight_bytes: v("fit-weights"), per_gpu_kv_bytes: v("fit-kv"),
    context: Number(document.getElementById("fit").dataset.context), tp: Number(document.getElementById("fit-tp").value),
    gpus: [...document.querySelectorAll("#fit-table tr[data-gpu]")].map(tr => ({ name: tr.dataset.gpu, count: Number(tr.dataset.count),
      fits: tr.dataset.fits === "true", max_context: Number(tr.dataset.max) })) });
})()`

func checkFit(t *testing.T, what string, page string, cli fitDoc) {
	t.Helper()
	var got fitDoc
	if err := json.Unmarshal([]byte(page), &got); err != nil {
		t.Fatal(err)
	}
	if got.PerGPUWeightBytes != cli.PerGPUWeightBytes || got.PerGPUKVBytes != cli.PerGPUKVBytes || got.Context != cli.Context || got.TP != cli.TP || len(got.GPUs) != len(cli.GPUs) {
		t.Fatalf("%s: page %+v, fit --json %+v", what, got, cli)
	}
	for i, g := range cli.GPUs {
		if got.GPUs[i] != g {
			t.Errorf("%s: GPU row %d on the page %+v, fit --json %+v", what, i, got.GPUs[i], g)
		}
	}
}

// The "Will it fit" card shows what `quantscope fit --json` prints for the
// same repo and options, and follows the slider, TP and a custom GPU.
func TestFitCard(t *testing.T) {
	base := serve(t, "--demo")
	ctx := newBrowser(t, 1366, 1000)
	id := synth.Org + "/DeepSeek-tiny-FP8"
	openRepo(t, ctx, base, id)
	waitJS(t, ctx, `document.getElementById("fit").dataset.state === "ready"`, 30*time.Second)

	var cli fitDoc
	if err := json.Unmarshal(quantscope(t, "fit", "--json", "--endpoint", base, id), &cli); err != nil {
		t.Fatal(err)
	}
	// By hand from its config: MLA, 2 layers of one BF16 latent of
	// kv_lora_rank 256 + qk_rope_head_dim 64; no max_position_embeddings,
	// so the default context is 8192.
	if cli.KVBytesPerToken != 2*(256+64)*2 || cli.Context != 8192 || cli.PerGPUKVBytes != 2*(256+64)*2*8192 {
		t.Fatalf("fit --json: %+v", cli)
	}
	checkFit(t, "default", eval[string](t, ctx, fitOnScreen), cli)

	// TP 2, the slider at 2^11 tokens, and a 2 MB GPU of one's own.
	eval[bool](t, ctx, `(() => {
	  const s = document.getElementById("fit-context"); s.value = 88; s.dispatchEvent(new Event("input"));
	  const tp = document.getElementById("fit-tp"); tp.value = "2"; tp.dispatchEvent(new Event("change"));
	  const c = document.getElementById("fit-custom"); c.value = "tiny:0.002"; c.dispatchEvent(new Event("change"));
	  return true; })()`)
	waitJS(t, ctx, `document.getElementById("fit").dataset.context === "2048" && document.querySelector('#fit-table tr[data-gpu="tiny"]')`, 10*time.Second)
	if err := json.Unmarshal(quantscope(t, "fit", "--json", "--endpoint", base, "--tp", "2", "--context", "2048",
		"--gpu", "H100", "--gpu", "H200", "--gpu", "B200", "--gpu", "L40S", "--gpu", "RTX 4090", "--gpu", "RTX 5090", "--gpu", "tiny:0.002", id), &cli); err != nil {
		t.Fatal(err)
	}
	if cli.GPUs[6].Fits || cli.GPUs[6].Count != 0 || cli.GPUs[6].MaxContext == 0 { // 1.8 MB usable: not at 2048, at a shorter context
		t.Fatalf("tiny GPU: %+v", cli.GPUs[6])
	}
	checkFit(t, "tp 2, context 2048, custom GPU", eval[string](t, ctx, fitOnScreen), cli)

	// A GPU the catalog lacks, without its size: the engine's error, in the card.
	eval[bool](t, ctx, `(() => { const c = document.getElementById("fit-custom"); c.value = "A100"; c.dispatchEvent(new Event("change")); return true; })()`)
	waitJS(t, ctx, `document.getElementById("fit").dataset.state === "error"`, 10*time.Second)
	if msg := eval[string](t, ctx, `document.getElementById("fit-error").textContent`); msg != `GPU "A100": not in the catalog (H100, H200, B200, L40S, RTX 4090, RTX 5090); type its memory as NAME:GB (e.g. A100:80)` {
		t.Errorf("error shown: %q", msg)
	}

	// A TP degree the heads do not allow: no memory bar, no max context.
	mini := synth.Org + "/DeepSeek-mini-NVFP4"
	do(t, ctx, chromedp.Navigate(pageURL(base, mini, "")))
	waitJS(t, ctx, fmt.Sprintf("document.body.dataset.loaded === %q && document.getElementById(\"fit\").dataset.state === \"ready\"", mini), 60*time.Second)
	eval[bool](t, ctx, `(() => { const tp = document.getElementById("fit-tp"); tp.value = "2"; tp.dispatchEvent(new Event("change")); return true; })()`)
	waitJS(t, ctx, `document.getElementById("fit-table").rows[0].innerText.includes("TP 2")`, 10*time.Second)
	refused := eval[map[string]any](t, ctx, `(() => ({ bar: document.getElementById("fit-bar").hidden, left: document.getElementById("fit-left").textContent,
	  maxes: [...document.querySelectorAll("#fit-table tr[data-gpu]")].map(r => r.cells[4].textContent).join(","),
	  fits: [...document.querySelectorAll("#fit-table tr[data-gpu]")].map(r => r.cells[2].textContent).join(",") }))()`)
	if refused["bar"] != true || refused["left"] != "TP 2 cannot run this model" || strings.Trim(refused["maxes"].(string), "—,") != "" || !strings.Contains(refused["fits"].(string), "no (TP)") {
		t.Errorf("TP 2 refused on %s: %v", mini, refused)
	}

	// On a phone's width the card stays inside the page (its table scrolls).
	do(t, ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(pageURL(base, id, "")))
	waitJS(t, ctx, fmt.Sprintf("document.body.dataset.loaded === %q && document.getElementById(\"fit\").dataset.state === \"ready\" && window.innerWidth === 390", id), 60*time.Second)
	if eval[bool](t, ctx, `document.documentElement.scrollWidth > window.innerWidth + 1`) {
		t.Error("the page with the fit card overflows a 390 px phone")
	}
}

// A repo shaped like a real one (sparse shards, real headers and config)
// behind `serve --hub`: the card's figure for the README, checked against
// fit --json like the demo.
func TestFitCardRealShape(t *testing.T) {
	dir := t.TempDir()
	id := "shapes/Llama-3.1-70B-FP8-shape"
	if err := synth.WriteLlama70BFP8Shape(filepath.Join(dir, filepath.FromSlash(id))); err != nil {
		t.Fatal(err)
	}
	base := serve(t, "--hub", dir)
	ctx := newBrowser(t, 1100, 1000)
	openRepo(t, ctx, base, id)
	waitJS(t, ctx, `document.getElementById("fit").dataset.state === "ready"`, 30*time.Second)
	eval[bool](t, ctx, `(() => { const g = document.getElementById("fit-gpu"); g.value = "H100"; g.dispatchEvent(new Event("change")); return true; })()`)
	var cli fitDoc
	if err := json.Unmarshal(quantscope(t, "fit", "--json", "--endpoint", base, id), &cli); err != nil {
		t.Fatal(err)
	}
	// 80 layers × 2 × 8 KV heads × 128 × 1 byte (FP8, as hf_quant_config.json declares).
	if cli.KVBytesPerToken != 80*2*8*128*1 || cli.Context != 32768 {
		t.Fatalf("fit --json: %+v", cli)
	}
	checkFit(t, "70B shape", eval[string](t, ctx, fitOnScreen), cli)
	buf, err := chromedp.Run(ctx, chromedp.Screenshot("#fit"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(outDir, "fit.png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s; H100 needs %s GPU(s)", p, strconv.Itoa(cli.GPUs[0].Count))
}
