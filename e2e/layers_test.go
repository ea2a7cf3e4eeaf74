package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/quantscope/quantscope/synth"
)

// The layer map on screen is inspect --json's layers[]: every cell in its
// row and slot with its format and colour, a hover label with its modules,
// bytes and bits per weight, and a click that filters the module table to
// exactly the cell's modules.
func TestLayerMap(t *testing.T) {
	base := serve(t, "--demo")
	ctx := newBrowser(t, 1366, 1000)
	repo := synth.Org + "/DeepSeek-mini-NVFP4"
	var inv struct {
		Layers []struct {
			Row   string
			Layer int
			Cells []struct {
				Slot, Format string
				Modules      int
				Bytes        uint64
				Pattern      string
			}
		}
		Modules []struct{ Name string }
	}
	if err := json.Unmarshal(quantscope(t, "inspect", "--json", "--endpoint", base, repo), &inv); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, chromedp.Navigate(pageURL(base, repo, "")))
	waitJS(t, ctx, fmt.Sprintf("document.body.dataset.loaded === %q && document.getElementById('layermap-svg')", repo), 60*time.Second)
	type cell struct{ Row, Layer, Slot, Format, Fill string }
	shown := eval[[]cell](t, ctx, `[...document.querySelectorAll("#layermap-svg g.lm-cell")].map(g => ({Row: g.dataset.row, Layer: g.dataset.layer, Slot: g.dataset.slot, Format: g.dataset.format, Fill: getComputedStyle(g.querySelector("rect")).fill}))`)
	legend := eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll("#layermap-legend span")].map(s => [s.dataset.format, getComputedStyle(s.querySelector("i")).backgroundColor]))`)
	i := 0
	for _, r := range inv.Layers {
		for _, c := range r.Cells {
			if i >= len(shown) {
				t.Fatalf("%d cells on screen, inspect --json has more", len(shown))
			}
			s := shown[i]
			if s.Row != r.Row || s.Layer != fmt.Sprint(r.Layer) || s.Slot != c.Slot || s.Format != c.Format {
				t.Errorf("cell %d: screen %+v, inspect %s %d %s %s", i, s, r.Row, r.Layer, c.Slot, c.Format)
			}
			if c.Format != "mixed" && (s.Fill == "" || s.Fill != legend[c.Format]) {
				t.Errorf("cell %d (%s): fill %q, the legend's %s is %q", i, c.Slot, s.Fill, c.Format, legend[c.Format])
			}
			i++
		}
	}
	if i != len(shown) || len(legend) < 3 || legend["nvfp4"] == legend["bf16"] {
		t.Fatalf("%d cells on screen, %d in inspect --json; legend %v", len(shown), i, legend)
	}
	// The extra (MTP) layer is marked, and attention is BF16 in every layer.
	if n := eval[int](t, ctx, `document.querySelectorAll('#layermap-svg g[data-row="extra_layer"]').length`); n == 0 {
		t.Error("no extra layer row")
	}
	if n := eval[int](t, ctx, `[...document.querySelectorAll('#layermap-svg g[data-slot="q"]')].filter(g => g.dataset.format !== "bf16").length`); n != 0 {
		t.Errorf("%d q cells not bf16", n)
	}
	// Hover.
	sel := `#layermap-svg g[data-layer="5"][data-slot="experts"]`
	tip := eval[string](t, ctx, fmt.Sprintf(`(() => { const g = document.querySelector(%q); const b = g.getBoundingClientRect(); g.dispatchEvent(new MouseEvent("mouseenter", {clientX: b.x + 5, clientY: b.y + 5})); const t = document.getElementById("layermap-tip"); return t.hidden ? "" : t.innerText; })()`, sel))
	for _, want := range []string{"layer 5 · experts", "12 modules (4 experts): nvfp4 100%", "bits/weight", "parameters"} {
		if !strings.Contains(tip, want) {
			t.Errorf("hover label %q lacks %q", tip, want)
		}
	}
	shot(t, ctx, "layermap")
	// Click: the table lists the cell's 12 modules and nothing else.
	do(t, ctx, chromedp.Click(chromedp.CSS(sel)))
	waitJS(t, ctx, `document.getElementById("filter").value.startsWith("/^")`, 10*time.Second)
	waitJS(t, ctx, `document.getElementById("modules-count").textContent.startsWith("(12 of")`, 10*time.Second)
	names := eval[[]string](t, ctx, `[...document.querySelectorAll("#table .r")].filter(r => r.style.display !== "none").map(r => r.dataset.name)`)
	if len(names) == 0 {
		t.Fatal("no rows after the click")
	}
	for _, n := range names {
		if !strings.HasPrefix(n, "model.layers.5.mlp.experts.") {
			t.Errorf("row %s after clicking layer 5's experts", n)
		}
	}
}

// ?source=A&compare=B shows what `quantscope diff --json A B` says, kind by
// kind, with the changed modules; the form's "compare with" field leads to
// the same deep link, and opening a module keeps it.
func TestCompareView(t *testing.T) {
	base := serve(t, "--demo")
	ctx := newBrowser(t, 1366, 1100)
	a, b := synth.Org+"/DeepSeek-mini-FP8", synth.Org+"/DeepSeek-mini-NVFP4"
	var d struct {
		A, B struct {
			Source     string
			Bytes      uint64
			Parameters uint64
		}
		Changed []struct {
			Module string
			Count  int
		}
	}
	raw := quantscope(t, "diff", "--json", "--endpoint", base, a, b)
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	var kinds []struct {
		Kind   string `json:"kind"`
		ABytes uint64 `json:"a_bytes"`
		BBytes uint64 `json:"b_bytes"`
	}
	var whole struct {
		Kinds json.RawMessage `json:"kinds"`
	}
	if err := json.Unmarshal(raw, &whole); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(whole.Kinds, &kinds); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, chromedp.Navigate(pageURL(base, a, "")+"&compare="+url.QueryEscape(b)))
	waitJS(t, ctx, `(document.getElementById("compare-card").dataset.ready || "").includes("|")`, 60*time.Second)
	type rowT struct{ Kind, A, B string }
	rows := eval[[]rowT](t, ctx, `[...document.querySelectorAll("#compare-table tr[data-kind]")].map(tr => ({Kind: tr.dataset.kind, A: tr.dataset.aBytes, B: tr.dataset.bBytes}))`)
	if len(rows) != len(kinds)+2 {
		t.Fatalf("%d rows on screen, %d kinds (+ total, without extra layers) from diff --json: %+v", len(rows), len(kinds), rows)
	}
	for i, k := range kinds {
		if rows[i].Kind != k.Kind || rows[i].A != fmt.Sprint(k.ABytes) || rows[i].B != fmt.Sprint(k.BBytes) {
			t.Errorf("row %d: screen %+v, diff %+v", i, rows[i], k)
		}
	}
	if r := rows[len(kinds)]; r.Kind != "total" || r.A != fmt.Sprint(d.A.Bytes) || r.B != fmt.Sprint(d.B.Bytes) {
		t.Errorf("total row %+v, diff %d → %d", r, d.A.Bytes, d.B.Bytes)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#compare-changed li").length`); n != len(d.Changed) {
		t.Errorf("%d changed entries on screen, %d from diff", n, len(d.Changed))
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#compare-table .cmp-bar span").length`); n < len(kinds) {
		t.Errorf("%d bar segments", n)
	}
	shot(t, ctx, "compare")
	// Opening a module keeps the comparison in the URL.
	do(t, ctx, chromedp.Click(chromedp.CSS(`#table .r`)))
	waitJS(t, ctx, `location.search.includes("module=") && location.search.includes("compare=")`, 10*time.Second)
	// The form's field.
	openRepo(t, ctx, base, b)
	if !eval[bool](t, ctx, `document.getElementById("compare-card").hidden`) {
		t.Error("a repo opened without compare shows the compare card")
	}
	do(t, ctx, chromedp.SendKeys(chromedp.CSS("#compare"), a), chromedp.Click(chromedp.CSS("#open-btn")))
	waitJS(t, ctx, `(document.getElementById("compare-card").dataset.ready || "").includes("|") && new URLSearchParams(location.search).get("compare") === `+fmt.Sprintf("%q", a), 60*time.Second)
	if got := eval[string](t, ctx, `document.getElementById("cmp-side-b").dataset.bytes`); got != fmt.Sprint(d.A.Bytes) {
		t.Errorf("B = %s after the swap shows %s bytes, want %d", a, got, d.A.Bytes)
	}
	// A repo that does not exist says so in the card.
	do(t, ctx, chromedp.Navigate(pageURL(base, b, "")+"&compare="+url.QueryEscape(synth.Org+"/no-such-repo")))
	waitJS(t, ctx, `document.getElementById("compare-card").dataset.ready === "error"`, 60*time.Second)
}

// shotOf saves a screenshot of one element under test-output/.
func shotOf(t *testing.T, ctx context.Context, sel, name string) {
	eval[bool](t, ctx, `(document.querySelector(".bar").style.position = "static") && true`) // the sticky bar would cover the element
	buf, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	eval[bool](t, ctx, `(document.querySelector(".bar").style.position = "") || true`)
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(outDir, name+".png")
	if err := os.WriteFile(p, buf, 0o644); err == nil {
		t.Logf("screenshot: %s", p)
	}
}

// At the real shapes (headers real, data sparse): nvidia/DeepSeek-R1-FP4's
// layer map shows attention BF16 in all 61 layers, the experts NVFP4 in the
// 58 MoE layers and layer 61 (MTP) all BF16; the comparison with
// deepseek-ai/DeepSeek-R1 shows seed 004's ledger.
func TestDeepSeekR1Shapes(t *testing.T) {
	dir := t.TempDir()
	fp8, fp4 := "deepseek-ai/DeepSeek-R1", "nvidia/DeepSeek-R1-FP4"
	if err := synth.DeepSeekV3.WriteDeepSeekSparse(filepath.Join(dir, fp8), 163, false); err != nil {
		t.Fatal(err)
	}
	if err := synth.DeepSeekV3.WriteDeepSeekSparse(filepath.Join(dir, fp4), 80, true); err != nil {
		t.Fatal(err)
	}
	base := serve(t, "--hub", dir)
	ctx := newBrowser(t, 1366, 1000)
	do(t, ctx, chromedp.Navigate(pageURL(base, fp4, "")))
	waitJS(t, ctx, fmt.Sprintf("document.body.dataset.loaded === %q && document.getElementById('layermap-svg')", fp4), 3*time.Minute)
	type rowT struct {
		Row     string
		Layer   int
		Formats map[string]string
	}
	rows := eval[[]rowT](t, ctx, `(() => { const rows = new Map(); for (const g of document.querySelectorAll("#layermap-svg g.lm-cell")) { const k = g.dataset.row + " " + g.dataset.layer; if (!rows.has(k)) rows.set(k, {Row: g.dataset.row, Layer: Number(g.dataset.layer), Formats: {}}); rows.get(k).Formats[g.dataset.slot] = g.dataset.format; } return [...rows.values()]; })()`)
	if len(rows) != 64 {
		t.Fatalf("%d rows, want embedding + 61 layers + layer 61 + head", len(rows))
	}
	for _, r := range rows[1:63] {
		for _, s := range []string{"q", "kv", "o"} {
			if r.Formats[s] != "bf16" {
				t.Errorf("%s %d %s: %s", r.Row, r.Layer, s, r.Formats[s])
			}
		}
		want := "nvfp4"
		if r.Layer == 61 {
			want = "bf16"
			if r.Row != "extra_layer" {
				t.Errorf("layer 61 is a %s row", r.Row)
			}
		}
		slot := "experts"
		if r.Layer < 3 {
			slot = "gate"
		}
		if r.Formats[slot] != want {
			t.Errorf("layer %d %s: %s, want %s", r.Layer, slot, r.Formats[slot], want)
		}
	}
	do(t, ctx, chromedp.ScrollIntoView(chromedp.CSS("#layermap")))
	shotOf(t, ctx, "#layermap", "layermap-deepseek-r1-fp4")

	do(t, ctx, chromedp.Navigate(pageURL(base, fp8, "")+"&compare="+url.QueryEscape(fp4)))
	waitJS(t, ctx, `(document.getElementById("compare-card").dataset.ready || "").includes("|")`, 5*time.Minute)
	got := eval[map[string][]string](t, ctx, `Object.fromEntries([...document.querySelectorAll("#compare-table tr[data-kind]")].map(tr => [tr.dataset.kind, [...tr.children].slice(1, 8).map(td => td.textContent)]))`)
	for kind, want := range map[string][]string{
		"routed_experts": {"653.91 B", "654.07 GB", "8.00", "367.82 GB", "4.50", "−286.24 GB", "0.56×"},
		"attention":      {"11.41 B", "11.42 GB", "8.00", "22.83 GB", "16.00", "+11.41 GB", "2.00×"},
		"extra_layers":   {"13.46 B", "15.42 GB", "9.17", "26.93 GB", "16.00", "+11.50 GB", "1.75×"},
		"total":          {"684.49 B", "688.57 GB", "8.05", "423.61 GB", "4.95", "−264.97 GB", "0.62×"},
	} {
		if fmt.Sprint(got[kind]) != fmt.Sprint(want) {
			t.Errorf("%s: %v on screen, want %v", kind, got[kind], want)
		}
	}
	if w := got["without extra layers"]; len(w) < 5 || w[4] != "4.73" {
		t.Errorf("without extra layers: %v, want 4.73 bits/weight for B", w)
	}
	shotOf(t, ctx, "#compare-card", "compare-deepseek-r1")
}
