package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/quantscope/quantscope/companion/localhub"
	"github.com/quantscope/quantscope/synth"
)

// Where the engine runs: in a Web Worker whose HTTP the page's thread sends
// (the default), or on the page when the browser has no Worker or the
// worker does not start. Each way reads the same inventory as inspect
// --json with the same requests, decodes the same sample, and reports a
// missing repo as not found. The hub ignores Range on the shards (a 200
// with the whole file), so the worker also reads bodies chunk by chunk
// through the page's thread and stops where the header ends.
func TestEngineWorkerAndFallback(t *testing.T) {
	dir := t.TempDir()
	r := synth.DeepSeekFP8()
	if err := r.WriteDir(dir + "/" + r.ID); err != nil {
		t.Fatal(err)
	}
	h, err := localhub.New(dir, localhub.Options{Faults: func(req *http.Request, p string, n int) localhub.Fault {
		return localhub.Fault{IgnoreRange: strings.HasSuffix(p, ".safetensors")}
	}})
	if err != nil {
		t.Fatal(err)
	}
	hub := httptest.NewServer(h)
	defer hub.Close()
	var want inventory
	h.ResetStats()
	if err := json.Unmarshal(quantscope(t, "inspect", "--json", "--endpoint", hub.URL, r.ID), &want); err != nil {
		t.Fatal(err)
	}
	nativeReq, _ := h.Stats()
	module := ""
	for _, m := range want.Modules {
		if m.Format == "fp8" {
			module = m.Name
			break
		}
	}
	if module == "" {
		t.Fatal("no fp8 module in the repo")
	}
	base := serve(t, "--demo")
	var first []float64
	for _, c := range []struct {
		name, init, engine string
	}{
		{"worker", "", "worker"},
		{"no Worker", "delete window.Worker;", "page"},
		{"worker fails to start", `window.Worker = class extends Worker { constructor() { super("web/no-such-worker.js"); } };`, "page"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := newBrowser(t, 1366, 900)
			if c.init != "" {
				do(t, ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
					_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: c.init})
					return err
				}))
			}
			h.ResetStats()
			q := url.Values{"source": {r.ID}, "endpoint": {hub.URL}}
			do(t, ctx, chromedp.Navigate(base+"/?"+q.Encode()))
			waitJS(t, ctx, fmt.Sprintf("document.body.dataset.loaded === %q", r.ID), 90*time.Second)
			pageReq, _ := h.Stats()
			if got := eval[string](t, ctx, `document.body.dataset.engine`); got != c.engine {
				t.Fatalf("engine runs on %q, want %q", got, c.engine)
			}
			// The page's thread sends the engine's requests either way; the
			// wasm is loaded by the thread that runs it.
			type res struct{ Hub, Wasm int }
			got := eval[res](t, ctx, `(() => { const n = performance.getEntriesByType("resource").map(e => e.name); return {Hub: n.filter(u => u.startsWith("`+hub.URL+`")).length, Wasm: n.filter(u => u.endsWith("/wasm/quantscope.wasm")).length}; })()`)
			if got.Hub == 0 {
				t.Error("the page's thread made none of the requests to the hub")
			}
			if wasmOnPage := got.Wasm > 0; wasmOnPage != (c.engine == "page") {
				t.Errorf("quantscope.wasm fetched by the page's thread: %v, engine on %s", wasmOnPage, c.engine)
			}
			if pageReq != nativeReq {
				t.Errorf("%d requests from the page, %d from inspect", pageReq, nativeReq)
			}
			if n := eval[int](t, ctx, `Number(document.getElementById("sum-tensors").dataset.value)`); n != want.Summary.Tensors {
				t.Errorf("%d tensors on screen, inspect --json says %d", n, want.Summary.Tensors)
			}
			if p := eval[string](t, ctx, `document.getElementById("sum-parameters").dataset.value`); p != fmt.Sprint(want.Summary.Parameters) {
				t.Errorf("parameters %s on screen, inspect --json says %d", p, want.Summary.Parameters)
			}
			type sample struct {
				Rows   int
				Values []float64
			}
			s, err := chromedp.Run(ctx, chromedp.Evaluate[sample](fmt.Sprintf(`quantscope.sample(%q, 0, 2).then(r => ({Rows: JSON.parse(r.json).rows, Values: Array.from(r.values)}))`, module), chromedp.EvalAwaitPromise))
			if err != nil {
				t.Fatal(err)
			}
			if s.Rows != 2 || len(s.Values) == 0 {
				t.Fatalf("sample of %s: %d rows, %d values", module, s.Rows, len(s.Values))
			}
			if first == nil {
				first = s.Values
			} else if fmt.Sprint(s.Values) != fmt.Sprint(first) {
				t.Errorf("sample of %s differs from the worker's", module)
			}
			// An error crosses from the engine with its kind.
			eval[bool](t, ctx, `(go({source: "nobody/nothing", rev: "", module: ""}), true)`)
			waitJS(t, ctx, `document.getElementById("error").dataset.kind === "not-found"`, 60*time.Second)
		})
	}
}
