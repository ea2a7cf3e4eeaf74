package e2e

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/quantscope/quantscope/synth"
)

// recorder is a server on another loopback port that answers CORS to any
// page and 404 to everything, and keeps what it was asked with.
type recorder struct {
	mu    sync.Mutex
	paths []string
	auth  []string
	srv   *httptest.Server
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		r.mu.Lock()
		r.paths = append(r.paths, q.Method+" "+q.URL.Path)
		if a := q.Header.Get("Authorization"); a != "" {
			r.auth = append(r.auth, a)
		}
		r.mu.Unlock()
		w.Header().Set("Access-Control-Allow-Origin", q.Header.Get("Origin"))
		w.Header().Set("Access-Control-Allow-Headers", "Authorization, Range")
		if q.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		http.NotFound(w, q)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) take() (paths, auth []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	paths, auth, r.paths, r.auth = r.paths, r.auth, nil, nil
	return paths, auth
}

// The token under Settings goes to Hugging Face, to the page's own server
// and to endpoints chosen in Settings: a crafted link that names another
// hub (?endpoint=, a source URL, a compare URL) reaches that hub without
// it. And the companion token of a link goes to the page's own server, not
// to a companion URL saved earlier.
func TestTokensStayHome(t *testing.T) {
	base, token := serveToken(t, "--demo")
	evil := newRecorder(t)
	ctx := newBrowser(t, 1366, 900)
	do(t, ctx, chromedp.Navigate(base+"/"))
	eval[bool](t, ctx, `(sessionStorage.setItem("qs-token", "hf_secret"), localStorage.setItem("qs-companion-url", `+jsQuote(evil.srv.URL)+`), true)`)

	demo := synth.Org + "/Llama-tiny-NVFP4"
	for _, link := range []string{
		pageURL(base, "org/name", "") + "&endpoint=" + url.QueryEscape(evil.srv.URL),
		pageURL(base, evil.srv.URL+"/org/name/tree/main", ""),
		pageURL(base, demo, "") + "&compare=" + url.QueryEscape(evil.srv.URL+"/org/name/tree/main"),
	} {
		do(t, ctx, chromedp.Navigate(link))
		deadline := time.Now().Add(30 * time.Second)
		var paths, auth []string
		for time.Now().Before(deadline) && len(paths) == 0 {
			time.Sleep(100 * time.Millisecond)
			p, a := evil.take()
			paths, auth = append(paths, p...), append(auth, a...)
		}
		time.Sleep(500 * time.Millisecond) // the requests that follow the first
		p, a := evil.take()
		paths, auth = append(paths, p...), append(auth, a...)
		if len(paths) == 0 {
			t.Fatalf("%s: the page asked the other hub nothing", link)
		}
		if len(auth) > 0 {
			t.Errorf("%s: the other hub was sent %v (%d requests)", link, auth, len(paths))
		}
		for _, p := range paths {
			if strings.HasSuffix(p, "/ws") {
				t.Errorf("%s: the page opened the saved companion URL: %s", link, p)
			}
		}
	}

	// Chosen under Settings, the same hub is trusted with the token.
	eval[bool](t, ctx, `(document.getElementById("settings").open = true, document.getElementById("endpoint").value = "custom", document.getElementById("endpoint").dispatchEvent(new Event("change")),
		document.getElementById("endpoint-custom").hidden = false, document.getElementById("endpoint-custom").value = `+jsQuote(evil.srv.URL)+`, document.getElementById("endpoint-custom").dispatchEvent(new Event("change")),
		document.getElementById("source").value = "org/name", document.getElementById("open-btn").click(), true)`)
	waitJS(t, ctx, `!document.getElementById("error").hidden`, 30*time.Second)
	if _, auth := evil.take(); len(auth) == 0 || auth[0] != "Bearer hf_secret" {
		t.Errorf("an endpoint chosen in Settings was sent %v, want the token", auth)
	}

	// The companion link's token goes to this page's server, not to the
	// companion URL saved earlier (which now points at the other server).
	do(t, ctx, chromedp.Navigate(base+"/?token="+token))
	waitJS(t, ctx, "window.companion && companion.connected()", 30*time.Second)
	if paths, _ := evil.take(); len(paths) > 0 {
		t.Errorf("the saved companion URL was asked %v", paths)
	}
}
