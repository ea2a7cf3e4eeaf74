package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/quantscope/quantscope/companion/localhub"
	"github.com/quantscope/quantscope/synth"
)

// A shard the hub keeps failing (the network lost mid-way): the page keeps
// what it read, and says which shard is missing. The page reads this hub
// cross-origin, so its CORS answers are exercised too.
func TestShardLostMidway(t *testing.T) {
	dir := t.TempDir()
	r := synth.DeepSeekFP8()
	if err := r.WriteDir(filepath.Join(dir, filepath.FromSlash(r.ID))); err != nil {
		t.Fatal(err)
	}
	h, err := localhub.New(dir, localhub.Options{Faults: func(req *http.Request, p string, n int) localhub.Fault {
		if p == "model-00002-of-00002.safetensors" {
			return localhub.Fault{Status: http.StatusBadGateway}
		}
		return localhub.Fault{}
	}})
	if err != nil {
		t.Fatal(err)
	}
	faulty := httptest.NewServer(h)
	defer faulty.Close()
	base := serve(t, "--demo")
	ctx := newBrowser(t, 1366, 900)
	q := url.Values{"source": {r.ID}, "endpoint": {faulty.URL}}
	do(t, ctx, chromedp.Navigate(base+"/?"+q.Encode()))
	waitJS(t, ctx, fmt.Sprintf("document.body.dataset.loaded === %q", r.ID), 90*time.Second)
	msg := eval[string](t, ctx, `(document.querySelector('#findings-list li[data-rule="shard-unreadable"]') || {}).textContent || ""`)
	if !strings.Contains(msg, "model-00002-of-00002.safetensors") {
		t.Fatalf("no shard-unreadable finding naming the lost shard: %q", msg)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#findings-list li[data-rule="index-missing-tensor"]').length`); n != 0 {
		t.Errorf("%d index-missing-tensor findings for the tensors of the shard that could not be read", n)
	}
	if n := eval[string](t, ctx, `document.getElementById("sum-files").dataset.value`); n != "1" {
		t.Errorf("files on screen %s, want the 1 shard that was read", n)
	}
	shot(t, ctx, "shard-lost")
}

// A server whose answers carry no CORS headers: the browser refuses them,
// and the page says the network or CORS failed.
func TestCORSRefused(t *testing.T) {
	plain := httptest.NewServer(http.NotFoundHandler()) // no Access-Control-Allow-Origin
	defer plain.Close()
	base := serve(t, "--demo")
	ctx := newBrowser(t, 1366, 900)
	q := url.Values{"source": {"org/name"}, "endpoint": {plain.URL}}
	do(t, ctx, chromedp.Navigate(base+"/?"+q.Encode()))
	waitJS(t, ctx, `document.getElementById("error").dataset.kind === "network"`, 90*time.Second)
	if !eval[bool](t, ctx, `document.getElementById("error").textContent.includes("CORS")`) {
		t.Error("the network error does not mention CORS")
	}
	shot(t, ctx, "cors-refused")
}

// Many findings of one rule: the first few are listed, the rest on request.
func TestRepeatedFindingsFold(t *testing.T) {
	dir := t.TempDir()
	r := synth.DeepSeekFP8()
	repoDir := filepath.Join(dir, filepath.FromSlash(r.ID))
	if err := r.WriteDir(repoDir); err != nil {
		t.Fatal(err)
	}
	var idx map[string]any
	p := filepath.Join(repoDir, "model.safetensors.index.json")
	b, _ := os.ReadFile(p)
	json.Unmarshal(b, &idx)
	wm := idx["weight_map"].(map[string]any)
	dropped := 0
	for name := range wm {
		if strings.HasSuffix(name, ".weight_scale_inv") {
			delete(wm, name)
			dropped++
		}
	}
	b, _ = json.Marshal(idx)
	os.WriteFile(p, b, 0o644)
	base := serve(t, "--hub", dir)
	ctx := newBrowser(t, 1366, 900)
	do(t, ctx, chromedp.Navigate(pageURL(base, r.ID, "")))
	waitJS(t, ctx, fmt.Sprintf("document.body.dataset.loaded === %q", r.ID), 60*time.Second)
	count := func() int {
		return eval[int](t, ctx, `document.querySelectorAll('#findings-list li[data-rule="index-unlisted-tensor"]').length`)
	}
	if n := count(); n != 25 || dropped <= 25 {
		t.Fatalf("%d of %d unlisted-tensor findings listed before expanding, want 25", n, dropped)
	}
	do(t, ctx, chromedp.Click(chromedp.CSS(`#findings-list li.more button`)))
	if n := count(); n != dropped {
		t.Fatalf("%d listed after expanding, want %d", n, dropped)
	}
}
