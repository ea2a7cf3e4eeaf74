package hub_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
)

// A redirect to the same URL, or back to one already visited, is reported
// as a loop; a long chain as too many redirects; a 302 without Location, or
// to another scheme than HTTP, as such. Each is asked for a bounded number of times (no endless hopping).
func TestRedirectLoops(t *testing.T) {
	var hits atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/self.safetensors", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "/self.safetensors", http.StatusFound)
	})
	mux.HandleFunc("/a.safetensors", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "/b.safetensors?x=1", http.StatusFound)
	})
	mux.HandleFunc("/b.safetensors", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "/a.safetensors", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/chain/", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, r.URL.Path+"x", http.StatusFound)
	})
	mux.HandleFunc("/noloc.safetensors", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusFound)
	})
	mux.HandleFunc("/ftp.safetensors", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "ftp://files.example/m.safetensors", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := hub.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for path, want := range map[string]string{
		"/self.safetensors":        "redirect loop: the URL redirects to itself",
		"/a.safetensors":           "redirect loop: redirected back to " + srv.URL + "/a.safetensors",
		"/chain/model.safetensors": "more than 5 redirects",
		"/noloc.safetensors":       "redirect without a",
		"/ftp.safetensors":         `redirect to a "ftp" URL, which is not HTTP`,
	} {
		hits.Store(0)
		_, err := checkpoint.Load(ctx, c.OpenURL(ctx, srv.URL+path), checkpoint.Options{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
		if hits.Load() > 20 {
			t.Errorf("%s: %d requests", path, hits.Load())
		}
	}
}
