package hub_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/quantscope/quantscope/formats/hub"
)

// A hub whose listing never ends is refused with a bounded memory and
// number of requests: pages that keep adding files stop at the file bound,
// a page that names itself as the next at once.
func TestListingBounds(t *testing.T) {
	var hits atomic.Int32
	mux := http.NewServeMux()
	const perPage = 20_000
	mux.HandleFunc("/api/models/org/endless/tree/main", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		p, _ := strconv.Atoi(r.URL.Query().Get("p"))
		w.Header().Set("Link", fmt.Sprintf(`</api/models/org/endless/tree/main?recursive=true&p=%d>; rel="next"`, p+1))
		var b strings.Builder
		b.WriteString("[")
		for i := range perPage {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"type":"file","path":"f/%d/%d.bin","size":1}`, p, i)
		}
		b.WriteString("]")
		w.Write([]byte(b.String()))
	})
	mux.HandleFunc("/api/models/org/self/tree/main", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Link", `<`+r.URL.String()+`>; rel="next"`)
		w.Write([]byte(`[{"type":"file","path":"config.json","size":2}]`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	for repo, want := range map[string]string{"org/endless": "more than 1048576 files", "org/self": "page 1 links to itself"} {
		hits.Store(0)
		src, err := hub.OpenSpec(context.Background(), hub.Spec{Kind: hub.KindRepo, Repo: repo, Endpoint: srv.URL}, "main")
		if err == nil {
			_, err = src.List(context.Background())
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", repo, err, want)
		}
		if n, most := hits.Load(), int32((1<<20)/perPage+2); n > most {
			t.Errorf("%s: %d requests, want at most %d", repo, n, most)
		}
	}
}
