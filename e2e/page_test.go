package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/device"
	"github.com/quantscope/quantscope/synth"
)

func pageURL(base, source, module string) string {
	q := url.Values{}
	q.Set("source", source)
	if module != "" {
		q.Set("module", module)
	}
	return base + "/?" + q.Encode()
}

type inventory struct {
	Commit  string
	Summary struct {
		Files, Tensors     int
		Bytes, Parameters  uint64
		BitsPerWeight      float64           `json:"bits_per_weight"`
		QuantizedModules   int               `json:"quantized_modules"`
		ParametersByFormat map[string]uint64 `json:"parameters_by_format"`
	}
	Modules  []struct{ Name, Format string }
	Findings []struct{ Rule, Severity, Tensor, Module string }
}

// Every demo repo: the numbers on screen are inspect --json's.
func TestDemoReposMatchInspect(t *testing.T) {
	base := serve(t, "--demo")
	ctx := newBrowser(t, 1366, 900)
	for _, r := range synth.All() {
		var want inventory
		if err := json.Unmarshal(quantscope(t, "inspect", "--json", "--endpoint", base, r.ID), &want); err != nil {
			t.Fatal(err)
		}
		do(t, ctx, chromedp.Navigate(pageURL(base, r.ID, "")))
		waitJS(t, ctx, fmt.Sprintf("document.body.dataset.loaded === %q", r.ID), 60*time.Second)
		got := eval[map[string]string](t, ctx, `(() => { const o = {}; for (const id of ["sum-files","sum-tensors","sum-bytes","sum-parameters","sum-bpw","sum-quantized","sum-commit"]) o[id] = document.getElementById(id)?.dataset.value ?? ""; o.text = document.getElementById("sum-parameters").textContent; o.formats = JSON.stringify(Object.fromEntries([...document.querySelectorAll("#by-format tr[data-format]")].map(tr => [tr.dataset.format, Number(tr.children[1].dataset.value)]))); o.findings = String(document.querySelectorAll("#findings-list li[data-rule]").length + [...document.querySelectorAll("#findings-list li[data-more-count]")].reduce((a, li) => a + Number(li.dataset.moreCount), 0)); o.rows = document.getElementById("modules-count").textContent; return o; })()`)
		s := want.Summary
		checks := map[string]string{"sum-files": strconv.Itoa(s.Files), "sum-tensors": strconv.Itoa(s.Tensors), "sum-bytes": strconv.FormatUint(s.Bytes, 10),
			"sum-parameters": strconv.FormatUint(s.Parameters, 10), "sum-quantized": strconv.Itoa(s.QuantizedModules),
			"sum-commit": want.Commit} // the commit the hub named, on screen as on the command line
		if len(want.Commit) != 40 {
			t.Errorf("%s: inspect --json over the hub gives commit %q", r.ID, want.Commit)
		}
		for id, v := range checks {
			if got[id] != v {
				t.Errorf("%s: %s on screen is %q, inspect --json says %q", r.ID, id, got[id], v)
			}
		}
		if bpw, _ := strconv.ParseFloat(got["sum-bpw"], 64); bpw != s.BitsPerWeight {
			t.Errorf("%s: bits per weight %v on screen, %v from inspect", r.ID, bpw, s.BitsPerWeight)
		}
		if !strings.HasPrefix(got["text"], formatInt(s.Parameters)) {
			t.Errorf("%s: parameters read %q on screen", r.ID, got["text"])
		}
		var formats map[string]uint64
		json.Unmarshal([]byte(got["formats"]), &formats)
		for f, n := range s.ParametersByFormat {
			if formats[f] != n {
				t.Errorf("%s: %s parameters %d on screen, %d from inspect", r.ID, f, formats[f], n)
			}
		}
		if got["findings"] != strconv.Itoa(len(want.Findings)) {
			t.Errorf("%s: %s findings on screen, %d from inspect", r.ID, got["findings"], len(want.Findings))
		}
		if !strings.Contains(got["rows"], strconv.Itoa(len(want.Modules))+" modules") {
			t.Errorf("%s: module count %q, want %d", r.ID, got["rows"], len(want.Modules))
		}
		shot(t, ctx, "repo-"+strings.TrimPrefix(r.ID, synth.Org+"/"))
	}
}

func formatInt(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// A module's sample shows the values decode --json gives for those rows.
func TestSampleMatchesDecode(t *testing.T) {
	base := serve(t, "--demo")
	ctx := newBrowser(t, 1366, 1000)
	for _, c := range []struct{ repo, module string }{
		{synth.Org + "/Llama-tiny-NVFP4", "model.layers.1.mlp.down_proj"},
		{synth.Org + "/DeepSeek-tiny-FP8", "model.layers.1.self_attn.kv_a_proj_with_mqa"},
		{synth.Org + "/Llama-tiny-GPTQ-Int4", "model.layers.0.self_attn.q_proj"},
		{synth.Org + "/gpt-oss-tiny-MXFP4", "model.layers.0.mlp.experts.down_proj"},
		{synth.Org + "/Llama-tiny-W3A16-asym-ct017", "model.layers.0.mlp.up_proj"},
	} {
		do(t, ctx, chromedp.Navigate(pageURL(base, c.repo, c.module)))
		waitJS(t, ctx, fmt.Sprintf("document.getElementById('sample').dataset.ready === %q", c.module+":0"), 60*time.Second)
		type shownT struct {
			Rows, Cols int
			Values     [][]string
		}
		shown := eval[shownT](t, ctx, `(() => { const t = document.getElementById("sample-table"); return { Rows: Number(t.dataset.rows), Cols: Number(t.dataset.cols), Values: [...t.querySelectorAll("tr")].slice(1).map(tr => [...tr.querySelectorAll("td")].map(td => td.dataset.v)) }; })()`)
		var dec struct {
			Shape  []int
			Values []float64
		}
		if err := json.Unmarshal(quantscope(t, "decode", "--json", "--endpoint", base, "--rows", fmt.Sprintf("0:%d", shown.Rows), c.repo, c.module), &dec); err != nil {
			t.Fatal(err)
		}
		if shown.Rows == 0 || dec.Shape[0] != shown.Rows || dec.Shape[1] != shown.Cols {
			t.Fatalf("%s: page shows %d×%d, decode %v", c.module, shown.Rows, shown.Cols, dec.Shape)
		}
		for i, row := range shown.Values {
			for j, v := range row {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil || float32(f) != float32(dec.Values[i*shown.Cols+j]) {
					t.Fatalf("%s [%d,%d]: page %q, decode %v", c.module, i, j, v, dec.Values[i*shown.Cols+j])
				}
			}
		}
		if !eval[bool](t, ctx, `document.getElementById("codes-cap").textContent.includes("code frequency")`) {
			t.Errorf("%s: no code frequency plot", c.module)
		}
		shot(t, ctx, "sample-"+strings.TrimPrefix(c.repo, synth.Org+"/"))
	}
}

// The repo whose labels lie: the findings name the rule and the tensor, and
// the tensor link opens its module.
func TestMislabeledFindings(t *testing.T) {
	base := serve(t, "--demo")
	ctx := newBrowser(t, 1366, 900)
	repo := synth.Org + "/Llama-tiny-FP4-mislabeled"
	openRepo(t, ctx, base, repo)
	for _, w := range []struct{ rule, tensor string }{
		{"config-excludes-quantized", "model.layers.0.self_attn.q_proj.weight"},
		{"index-total-size", ""},
		{"label-vs-bytes", ""},
		{"scale2-inconsistent", "model.layers.0.self_attn.o_proj.weight_scale_2"},
	} {
		sel := fmt.Sprintf(`#findings-list li[data-rule=%q]`, w.rule)
		if w.tensor != "" {
			sel += fmt.Sprintf(`[data-tensor=%q]`, w.tensor)
		}
		if n := eval[int](t, ctx, fmt.Sprintf("document.querySelectorAll(%q).length", sel)); n != 1 {
			t.Errorf("finding %s %s shown %d times", w.rule, w.tensor, n)
		}
	}
	do(t, ctx, chromedp.Click(chromedp.CSS(`#findings-list li[data-rule="config-excludes-quantized"] a`)))
	waitJS(t, ctx, `document.getElementById("panel").dataset.module === "model.layers.0.self_attn.q_proj" && location.search.includes("module=")`, 10*time.Second)
	shot(t, ctx, "mislabeled")
	// The back button closes the module again.
	do(t, ctx, chromedp.NavigateBack())
	waitJS(t, ctx, `document.getElementById("panel").hidden`, 10*time.Second)
}

func TestGatedAndBroken(t *testing.T) {
	base := serve(t, "--demo")
	ctx := newBrowser(t, 1366, 900)
	repo := synth.Org + "/Llama-tiny-NVFP4-gated"
	do(t, ctx, chromedp.Navigate(pageURL(base, repo, "")))
	waitJS(t, ctx, `document.getElementById("error").dataset.kind === "auth" && document.getElementById("settings").open && document.activeElement.id === "token"`, 60*time.Second)
	shot(t, ctx, "gated-no-token")
	do(t, ctx, chromedp.SendKeys(chromedp.CSS("#token"), "hf_quantscope_demo"), chromedp.Click(chromedp.CSS("#open-btn")))
	waitJS(t, ctx, fmt.Sprintf("document.body.dataset.loaded === %q && document.getElementById('error').hidden", repo), 60*time.Second)
	if eval[bool](t, ctx, `location.href.includes("hf_quantscope_demo")`) {
		t.Error("the token is in the URL")
	}
	shot(t, ctx, "gated-with-token")

	broken := synth.Org + "/broken-header"
	do(t, ctx, chromedp.Navigate(pageURL(base, broken, "")))
	waitJS(t, ctx, `document.getElementById("error").dataset.kind === "format"`, 60*time.Second)
	rule := eval[string](t, ctx, `document.getElementById("error-rule").textContent`)
	tensor := eval[string](t, ctx, `document.getElementById("error-tensor").textContent`)
	if rule != "contiguous" || tensor != "model.norm.weight" {
		t.Errorf("broken header shows rule %q tensor %q", rule, tensor)
	}
	shot(t, ctx, "broken-header")
}

// The phone width renders without horizontal overflow.
func TestPhoneWidth(t *testing.T) {
	base := serve(t, "--demo")
	ctx := newBrowser(t, 1000, 900)
	repo := synth.Org + "/DeepSeek-tiny-FP8"
	// Chromium's window is at least 500 px wide: emulate the phone instead.
	do(t, ctx, chromedp.Emulate(device.IPhone13), chromedp.Navigate(pageURL(base, repo, "")))
	if w := eval[int](t, ctx, `window.innerWidth`); w != 390 {
		t.Fatalf("the emulated phone is %d px wide, want 390", w)
	}
	waitJS(t, ctx, fmt.Sprintf("document.body.dataset.loaded === %q", repo), 60*time.Second)
	if eval[bool](t, ctx, `document.documentElement.scrollWidth > window.innerWidth + 1`) {
		t.Error("the page overflows a 390 px wide screen")
	}
	// The repo field is the one a person types into: it gets the row (it
	// was squeezed to 17 px beside the revision and compare fields).
	if w := eval[float64](t, ctx, `document.getElementById("source").getBoundingClientRect().width`); w < 300 {
		t.Errorf("the repo field is %.0f px wide on a 390 px phone", w)
	}
	for _, id := range []string{"rev", "compare", "open-btn"} {
		if r := eval[float64](t, ctx, `document.getElementById("`+id+`").getBoundingClientRect().right`); r > 391 {
			t.Errorf("#%s ends at %.0f px, past the 390 px screen", id, r)
		}
	}
	shot(t, ctx, "phone")
}

// A deep link to a module the repo lacks says so, with the modules whose
// names end alike, and drops it from the address (it was ignored in
// silence and kept in the URL).
func TestMissingModuleLink(t *testing.T) {
	base := serve(t, "--demo")
	ctx := newBrowser(t, 1366, 900)
	repo := synth.Org + "/Llama-tiny-NVFP4"
	do(t, ctx, chromedp.Navigate(pageURL(base, repo, "")+"&module=model.layers.9.mlp.up_proj"))
	waitJS(t, ctx, fmt.Sprintf("document.body.dataset.loaded === %q && !document.getElementById(\"module-missing\").hidden", repo), 60*time.Second)
	msg := eval[string](t, ctx, `document.getElementById("module-missing").textContent`)
	if !strings.Contains(msg, `No module "model.layers.9.mlp.up_proj" in this repo; modules ending in .up_proj: model.layers.0.mlp.up_proj, model.layers.1.mlp.up_proj.`) {
		t.Errorf("message %q", msg)
	}
	if u := eval[string](t, ctx, `location.search`); strings.Contains(u, "module=") || !eval[bool](t, ctx, `document.getElementById("panel").hidden`) {
		t.Errorf("the address keeps the module, or a panel opened: %q", u)
	}
	// a module that exists still opens, and the message goes
	do(t, ctx, chromedp.Navigate(pageURL(base, repo, "")+"&module=model.layers.1.mlp.up_proj"))
	waitJS(t, ctx, `document.getElementById("panel").dataset.module === "model.layers.1.mlp.up_proj"`, 60*time.Second)
	if !eval[bool](t, ctx, `document.getElementById("module-missing").hidden`) {
		t.Error("the missing-module message stays")
	}
}

// Lists that would run long fold, and a filter that cannot work says why:
// a note repeated per module (CT-004 over the network, one a module) shows
// three and a button for the rest; a filter that is no regular expression
// says so beside the count instead of showing an empty table; the heading
// names what the table lists.
func TestPageListsFoldAndSayWhy(t *testing.T) {
	base := serve(t, "--demo")
	ctx := newBrowser(t, 1366, 900)
	repo := synth.Org + "/Llama-tiny-W4A16"
	openRepo(t, ctx, base, repo)
	shown := eval[int](t, ctx, `document.querySelectorAll('#findings-list li[data-rule="CT-004"]').length`)
	more := eval[string](t, ctx, `(document.querySelector('#findings-list li[data-more-rule="CT-004"]') || {}).textContent || ""`)
	if shown != 3 || !strings.HasPrefix(more, "… and ") || !strings.HasSuffix(more, " more CT-004") {
		t.Errorf("CT-004 notes: %d shown, then %q", shown, more)
	}
	eval[bool](t, ctx, `(document.querySelector('#findings-list li[data-more-rule="CT-004"] button').click(), true)`)
	if n := eval[int](t, ctx, `document.querySelectorAll('#findings-list li[data-rule="CT-004"]').length`); n <= 3 {
		t.Errorf("the rest of the notes did not unfold: %d", n)
	}
	eval[bool](t, ctx, `(() => { const f = document.getElementById("filter"); f.value = "/[/"; f.dispatchEvent(new Event("input")); return true; })()`)
	if c := eval[string](t, ctx, `document.getElementById("modules-count").textContent`); !strings.Contains(c, "no regular expression") {
		t.Errorf("a broken filter: %q", c)
	}
	eval[bool](t, ctx, `(() => { const s = document.getElementById("show-tensors"); s.checked = true; s.dispatchEvent(new Event("change")); return true; })()`)
	waitJS(t, ctx, `document.getElementById("modules").querySelector("h2").textContent.startsWith("Tensors")`, 10*time.Second)
}
