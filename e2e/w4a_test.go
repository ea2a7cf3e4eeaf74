package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/quantscope/quantscope/synth"
)

// The "W4A / calibration" card: hidden without a companion; with one, it runs
// the eval job over pasted text on the demo's small GPTQ Llama and shows the
// perplexities `quantscope eval --json --compare` prints for the same lines,
// digit for digit; the calibration either runs (a companion with the
// "calibrate" op) or is refused with a message naming the missing op. The
// calibration file is one under the companion's --in-dir; a companion
// started without one offers no calibration and says how to allow it.
func TestW4APanel(t *testing.T) {
	ctx := newBrowser(t, 1366, 1400)
	repo := synth.Org + "/Llama-small-GPTQ"
	{
		base, token := serveToken(t, "--demo")
		do(t, ctx, chromedp.Navigate(base+"/?token="+token+"&source="+repo))
		waitJS(t, ctx, "document.body.dataset.loaded === "+jsQuote(repo)+" && companion.connected()", 60*time.Second)
		waitJS(t, ctx, `!document.getElementById("w4a").hidden`, 10*time.Second)
		hint := eval[string](t, ctx, `document.getElementById("w4a-files").textContent`)
		if !eval[bool](t, ctx, `document.getElementById("w4a-calib").disabled && document.getElementById("w4a-calib-data").disabled`) || !strings.Contains(hint, "--in-dir DIR") {
			t.Errorf("a companion without --in-dir: calibration offered, or hint %q", hint)
		}
	}
	inDir := t.TempDir()
	base, token := serveToken(t, "--demo", "--in-dir", inDir)
	do(t, ctx, chromedp.Navigate(base+"/?source="+repo))
	waitJS(t, ctx, "document.body.dataset.loaded === "+jsQuote(repo), 60*time.Second)
	if !eval[bool](t, ctx, `document.getElementById("w4a").hidden`) {
		t.Error("the W4A card shows without a companion")
	}
	do(t, ctx, chromedp.Navigate(base+"/?token="+token+"&source="+repo))
	waitJS(t, ctx, "document.body.dataset.loaded === "+jsQuote(repo)+" && companion.connected()", 60*time.Second)
	waitJS(t, ctx, `!document.getElementById("w4a").hidden`, 10*time.Second)

	lines := []string{"The quick brown fox jumps over the lazy dog.", "It's what we measure before we ship: 3.14 tokens!", "A naïve café — déjà vu, 2026."}
	eval[bool](t, ctx, `(document.getElementById("w4a-text").value = `+jsQuote(strings.Join(lines, "\n"))+`, document.getElementById("w4a-mode").value = "fp8", document.getElementById("w4a-eval").click(), true)`)
	waitJS(t, ctx, `["done","error"].includes(document.getElementById("w4a").dataset.state)`, 120*time.Second)
	if st := eval[string](t, ctx, `document.getElementById("w4a").dataset.state + ": " + document.getElementById("w4a-status").textContent`); !strings.HasPrefix(st, "done") {
		t.Fatalf("eval job: %s", st)
	}
	page := eval[map[string]string](t, ctx, `(() => { const v = id => document.getElementById(id).dataset.value;
		return { dense: v("w4a-dense-ppl"), w4a: v("w4a-w4a-ppl"), dnll: v("w4a-dense-nll"), wnll: v("w4a-w4a-nll"), ratio: v("w4a-ratio"),
		  points: document.getElementById("w4a-lines-plot").dataset.points }; })()`)

	f := filepath.Join(t.TempDir(), "lines.txt")
	if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var cli struct {
		Dense, W4A struct{ NLL, Perplexity float64 }
		Difference struct {
			Ratio float64 `json:"perplexity_ratio"`
		}
	}
	if err := json.Unmarshal(quantscope(t, "eval", "--json", "--compare", "--w4a", "fp8", "--text", f, "--endpoint", base, repo), &cli); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, got string
		want      float64
	}{{"dense perplexity", page["dense"], cli.Dense.Perplexity}, {"w4a perplexity", page["w4a"], cli.W4A.Perplexity},
		{"dense nll", page["dnll"], cli.Dense.NLL}, {"w4a nll", page["wnll"], cli.W4A.NLL}, {"ratio", page["ratio"], cli.Difference.Ratio}} {
		if v, err := strconv.ParseFloat(c.got, 64); err != nil || v != c.want {
			t.Errorf("%s: the page shows %q, eval --json says %v", c.name, c.got, c.want)
		}
	}
	if cli.Dense.Perplexity == cli.W4A.Perplexity {
		t.Error("dense and W4A perplexities are equal: the W4A side did not run")
	}
	if page["points"] != strconv.Itoa(2*len(lines)) {
		t.Errorf("the per-line plot has %s points, want %d", page["points"], 2*len(lines))
	}
	// The module panel opening beside the report narrows the plot: it is
	// drawn again at its new width, not stretched.
	before := eval[int](t, ctx, `document.getElementById("w4a-lines-plot").clientWidth`)
	eval[bool](t, ctx, `(selectModule("model.layers.0.mlp.down_proj"), true)`)
	waitJS(t, ctx, `document.body.classList.contains("panel-open")`, 10*time.Second)
	waitJS(t, ctx, `(() => { const c = document.getElementById("w4a-lines-plot"); return c.clientWidth !== `+strconv.Itoa(before)+` && c.width === Math.round(c.clientWidth * (window.devicePixelRatio || 1)); })()`, 10*time.Second)
	eval[bool](t, ctx, `(closePanel(true), true)`)

	// W4A-NVFP4 with the recipe chosen in the card: the job takes it, the
	// table names it, the perplexity is eval --recipe's, and the card says
	// the run is not causal; while it runs its buttons are off (one job at
	// a time), and no "null" is written under the table.
	eval[bool](t, ctx, `(document.getElementById("w4a-mode").value = "nvfp4", document.getElementById("w4a-recipe").value = "nvidia", document.getElementById("w4a-eval").click(), true)`)
	if !eval[bool](t, ctx, `document.getElementById("w4a").dataset.state !== "running" || (document.getElementById("w4a-eval").disabled && document.getElementById("w4a-calib").disabled)`) {
		t.Error("the card's buttons stay on while its job runs")
	}
	waitJS(t, ctx, `document.getElementById("w4a").dataset.state !== "running"`, 120*time.Second)
	if st := eval[string](t, ctx, `document.getElementById("w4a").dataset.state + ": " + document.getElementById("w4a-status").textContent`); !strings.HasPrefix(st, "done") {
		t.Fatalf("nvfp4 eval: %s", st)
	}
	if label := eval[string](t, ctx, `document.getElementById("w4a-ppl").innerText`); !strings.Contains(label, "W4A nvfp4 (nvidia)") {
		t.Errorf("nvfp4 eval done but the table shows %q", label)
	}
	if err := json.Unmarshal(quantscope(t, "eval", "--json", "--compare", "--w4a", "nvfp4", "--recipe", "nvidia", "--text", f, "--endpoint", base, repo), &cli); err != nil {
		t.Fatal(err)
	}
	if got, _ := strconv.ParseFloat(eval[string](t, ctx, `document.getElementById("w4a-w4a-ppl").dataset.value`), 64); got != cli.W4A.Perplexity {
		t.Errorf("W4A-NVFP4 (nvidia) perplexity on the page %v, eval --recipe nvidia %v", got, cli.W4A.Perplexity)
	}
	if out := eval[string](t, ctx, `document.getElementById("w4a-eval-out").innerText`); !strings.Contains(out, "not causal") || strings.Contains(out, "null") {
		t.Errorf("the card under the table: %q", out)
	}

	// Lines past the companion's message limit are refused on the page,
	// before they would close the connection.
	eval[bool](t, ctx, `(document.getElementById("w4a-text").value = "x ".repeat(200000), document.getElementById("w4a-eval").click(), true)`)
	if st := eval[string](t, ctx, `document.getElementById("w4a-status").textContent`); !strings.Contains(st, "message limit") || !eval[bool](t, ctx, `companion.connected()`) {
		t.Errorf("a paste past the limit: %q, connected %v", st, eval[bool](t, ctx, `companion.connected()`))
	}
	eval[bool](t, ctx, `(document.getElementById("w4a-text").value = `+jsQuote(strings.Join(lines, "\n"))+`, true)`)

	// Calibration: run it when the companion offers the op, else say so.
	if eval[bool](t, ctx, `companion.info().ops.includes("calibrate")`) {
		if err := os.WriteFile(filepath.Join(inDir, "calib.txt"), []byte("1 5 9 13 17 21 25 29\n2 4 8 16 32 64 128 256\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if h := eval[string](t, ctx, `document.getElementById("w4a-files").textContent`); h != "" {
			t.Errorf("a companion with --in-dir still says %q", h)
		}
		eval[bool](t, ctx, `(document.getElementById("w4a-calib-data").value = "calib.txt", document.getElementById("w4a-calib").click(), true)`)
		waitJS(t, ctx, `document.getElementById("w4a-amax-plot") || document.getElementById("w4a").dataset.state === "error"`, 120*time.Second)
		// 2 layers: layer 0's input, then o_proj.input, post_attention_residual,
		// down_proj.input and output of each layer (NUMERICS.md: 9 producers),
		// each an amax and a global scale point.
		if n := eval[string](t, ctx, `(document.getElementById("w4a-amax-plot")||{dataset:{}}).dataset.points + "/" + (document.getElementById("w4a-gs-plot")||{dataset:{}}).dataset.points`); n != "9/9" {
			t.Errorf("calibration plots: %s points, want 9/9 (%s)", n, eval[string](t, ctx, `document.getElementById("w4a-status").textContent`))
		}
		// The calibration leads somewhere: its report downloads as
		// calibrate --out writes it, and the W4A-NVFP4 perplexity with its
		// scales is eval --scales's.
		recipe := eval[string](t, ctx, `document.getElementById("w4a-recipe").value`)
		rep := filepath.Join(t.TempDir(), "act_max.json")
		quantscope(t, "calibrate", "--pass", "act_max", "--w4a", "nvfp4", "--recipe", recipe, "--data", filepath.Join(inDir, "calib.txt"), "--out", rep, "--endpoint", base, repo)
		var cliRep, pageRep struct {
			Recipe       string
			GlobalScales map[string]float32 `json:"global_scales"`
		}
		if b, err := os.ReadFile(rep); err != nil || json.Unmarshal(b, &cliRep) != nil {
			t.Fatalf("calibrate --out: %v", err)
		}
		dl, err := chromedp.Run(ctx, chromedp.Evaluate[string](`fetch(document.getElementById("w4a-calib-download").href).then(r => r.text())`, chromedp.EvalAwaitPromise))
		if err != nil || json.Unmarshal([]byte(dl), &pageRep) != nil || len(pageRep.GlobalScales) != 9 || pageRep.Recipe != cliRep.Recipe {
			t.Fatalf("the downloaded report: %v %q", err, dl)
		}
		for k, v := range cliRep.GlobalScales {
			if pageRep.GlobalScales[k] != v {
				t.Errorf("global scale %s: page %v, calibrate --out %v", k, pageRep.GlobalScales[k], v)
			}
		}
		uncalibrated := cli.W4A.Perplexity // eval --recipe nvidia without scales, above
		eval[bool](t, ctx, `(document.getElementById("w4a-use-scales").checked = true, document.getElementById("w4a-mode").value = "nvfp4", document.getElementById("w4a-eval").click(), true)`)
		waitJS(t, ctx, `document.getElementById("w4a").dataset.state !== "running"`, 120*time.Second)
		if st := eval[string](t, ctx, `document.getElementById("w4a").dataset.state + ": " + document.getElementById("w4a-status").textContent`); !strings.HasPrefix(st, "done") {
			t.Fatalf("eval with the calibrated scales: %s", st)
		}
		if label := eval[string](t, ctx, `document.getElementById("w4a-ppl").innerText`); !strings.Contains(label, "calibrated scales") {
			t.Errorf("the table does not say the scales were used: %q", label)
		}
		if err := json.Unmarshal(quantscope(t, "eval", "--json", "--compare", "--w4a", "nvfp4", "--scales", rep, "--text", f, "--endpoint", base, repo), &cli); err != nil {
			t.Fatal(err)
		}
		if got, _ := strconv.ParseFloat(eval[string](t, ctx, `document.getElementById("w4a-w4a-ppl").dataset.value`), 64); got != cli.W4A.Perplexity || got == uncalibrated {
			t.Errorf("W4A-NVFP4 with calibrated scales: page %v, eval --scales %v, without them %v", got, cli.W4A.Perplexity, uncalibrated)
		}
	} else {
		msg := eval[string](t, ctx, `document.getElementById("w4a-ops").textContent`)
		if !strings.Contains(msg, `no "calibrate" operation`) || !eval[bool](t, ctx, `document.getElementById("w4a-calib").disabled`) {
			t.Errorf("a companion without calibrate: message %q", msg)
		}
	}
	buf, err := chromedp.Run(ctx, chromedp.Screenshot("#w4a"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(outDir, "w4a.png")
	if err := os.WriteFile(p, buf, 0o644); err == nil {
		t.Logf("screenshot: %s", p)
	}

	// Without the companion the card keeps its results, its buttons off
	// and the reason said; a repo opened then has no card.
	eval[bool](t, ctx, `(companion.disconnect(), true)`)
	waitJS(t, ctx, `document.getElementById("w4a-ops").textContent.includes("not connected")`, 10*time.Second)
	if !eval[bool](t, ctx, `!document.getElementById("w4a").hidden && document.getElementById("w4a-eval").disabled && !!document.getElementById("w4a-ppl")`) {
		t.Error("the card's results went with the companion")
	}
	other := synth.Org + "/Llama-small"
	do(t, ctx, chromedp.Navigate(base+"/?source="+other))
	waitJS(t, ctx, "document.body.dataset.loaded === "+jsQuote(other), 60*time.Second)
	if !eval[bool](t, ctx, `document.getElementById("w4a").hidden`) {
		t.Error("a card without a companion on a fresh repo")
	}
}

// A job of the card belongs to its repo: opening another repo cancels it,
// and nothing it sends is shown there.
func TestW4AJobStaysWithItsRepo(t *testing.T) {
	ctx := newBrowser(t, 1366, 1400)
	base, token := serveToken(t, "--demo")
	repo, other := synth.Org+"/Llama-small-GPTQ", synth.Org+"/Llama-tiny-NVFP4"
	do(t, ctx, chromedp.Navigate(base+"/?token="+token+"&source="+repo))
	waitJS(t, ctx, "document.body.dataset.loaded === "+jsQuote(repo)+" && companion.connected()", 60*time.Second)
	waitJS(t, ctx, `!document.getElementById("w4a").hidden`, 10*time.Second)
	long := strings.Repeat("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20\n", 300)
	eval[bool](t, ctx, `(document.getElementById("w4a-kind").value = "ids", document.getElementById("w4a-text").value = `+jsQuote(long)+`, document.getElementById("w4a-mode").value = "fp8", document.getElementById("w4a-eval").click(), true)`)
	waitJS(t, ctx, `document.getElementById("w4a").dataset.state === "running"`, 10*time.Second)
	eval[bool](t, ctx, `(() => { window.cancelled = []; const c = companion.cancel; companion.cancel = id => { cancelled.push(id); return c(id); }; return true; })()`)
	eval[bool](t, ctx, `(document.getElementById("source").value = `+jsQuote(other)+`, document.getElementById("open-form").requestSubmit(), true)`)
	waitJS(t, ctx, "document.body.dataset.loaded === "+jsQuote(other), 60*time.Second)
	time.Sleep(3 * time.Second) // time for the old job's answer, were it not cancelled
	if got := eval[string](t, ctx, `document.getElementById("w4a-eval-out").innerText + "|" + document.getElementById("w4a-status").textContent + "|" + (document.getElementById("w4a").dataset.state || "")`); got != "||" {
		t.Errorf("the other repo's card shows %q", got)
	}
	if n := eval[int](t, ctx, `cancelled.length`); n != 1 {
		t.Errorf("the old repo's job was cancelled %d times, want once", n)
	}
}

// The card offers only what the forward can run on the repo on screen: on
// a model that is no Llama neither job; on a dense Llama the perplexity
// alone (W4A and the calibration, which measures W4A's producers, say why
// not), and token ids where the repo has no tokenizer.json. The dense
// perplexity then runs and equals `quantscope eval --json`'s.
func TestW4APanelOffersWhatRuns(t *testing.T) {
	ctx := newBrowser(t, 1366, 1400)
	base, token := serveToken(t, "--demo")
	open := func(repo string) {
		do(t, ctx, chromedp.Navigate(base+"/?token="+token+"&source="+repo))
		waitJS(t, ctx, "document.body.dataset.loaded === "+jsQuote(repo)+" && companion.connected()", 60*time.Second)
		waitJS(t, ctx, `!document.getElementById("w4a").hidden`, 10*time.Second)
	}
	open(synth.Org + "/gpt-oss-tiny-MXFP4")
	if why := eval[string](t, ctx, `document.getElementById("w4a-why").textContent`); !strings.Contains(why, "runs Llama decoders") || !strings.Contains(why, "gpt_oss") ||
		!eval[bool](t, ctx, `document.getElementById("w4a-eval").disabled && document.getElementById("w4a-calib").disabled`) {
		t.Errorf("gpt-oss: jobs offered, or %q", why)
	}

	repo := synth.Org + "/Llama-tiny-NVFP4" // a Llama, NVFP4 weights, no tokenizer.json
	open(repo)
	why := eval[string](t, ctx, `document.getElementById("w4a-why").textContent`)
	st := eval[map[string]any](t, ctx, `(() => { const $ = id => document.getElementById(id);
		return { mode: $("w4a-mode").value, fp8: $("w4a-mode").options[0].disabled, eval: $("w4a-eval").disabled, calib: $("w4a-calib").disabled,
		  kind: $("w4a-kind").value, text: $("w4a-kind").options[0].disabled, lines: $("w4a-text").value }; })()`)
	if !strings.Contains(why, "dense only") || !strings.Contains(why, "W4A needs GPTQ INT4") || !strings.Contains(why, "no tokenizer.json") ||
		st["mode"] != "none" || st["fp8"] != true || st["eval"] != false || st["calib"] != true || st["kind"] != "ids" || st["text"] != true {
		t.Fatalf("dense Llama without a tokenizer: %q %v", why, st)
	}
	eval[bool](t, ctx, `(document.getElementById("w4a-eval").click(), true)`)
	waitJS(t, ctx, `["done","error"].includes(document.getElementById("w4a").dataset.state)`, 120*time.Second)
	if s := eval[string](t, ctx, `document.getElementById("w4a").dataset.state + ": " + document.getElementById("w4a-status").textContent`); !strings.HasPrefix(s, "done") {
		t.Fatalf("dense eval job: %s", s)
	}
	ppl := eval[string](t, ctx, `document.getElementById("w4a-dense-ppl").dataset.value`)
	f := filepath.Join(t.TempDir(), "ids.txt")
	if err := os.WriteFile(f, []byte(st["lines"].(string)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var cli struct{ Perplexity float64 }
	if err := json.Unmarshal(quantscope(t, "eval", "--json", "--data", f, "--endpoint", base, repo), &cli); err != nil {
		t.Fatal(err)
	}
	if got, _ := strconv.ParseFloat(ppl, 64); got != cli.Perplexity {
		t.Errorf("dense perplexity on the page %s, eval --json %v", ppl, cli.Perplexity)
	}
}
