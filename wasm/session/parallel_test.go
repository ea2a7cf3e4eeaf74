package session

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantscope/quantscope/companion/localhub"
	"github.com/quantscope/quantscope/synth"
)

// The page keeps more header reads in flight than the CLI's 20: the hub
// holds each shard request until 40 are waiting (or a second has passed)
// and counts the most it saw at once.
func TestManyHeaderReadsInFlight(t *testing.T) {
	dir := t.TempDir()
	const repo = "bench/many-shards"
	if _, _, err := synth.WriteDeepSeekR1FP4Shape(filepath.Join(dir, repo), 80); err != nil {
		t.Fatal(err)
	}
	h, err := localhub.New(dir, localhub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const want = 40
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	inFlight, most := 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".safetensors") {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			cond.Broadcast()
			deadline := time.Now().Add(time.Second)
			for inFlight < want && time.Now().Before(deadline) {
				go func() { time.Sleep(50 * time.Millisecond); cond.Broadcast() }()
				cond.Wait()
			}
			mu.Unlock()
			defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	s, err := Open(context.Background(), repo, Options{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if most < want {
		t.Fatalf("at most %d shard requests in flight, want %d", most, want)
	}
}
