package hub_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/companion/localhub"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/synth"
)

// followingFetcher follows redirects as the browser's fetch does, reporting
// Redirected and the final URL.
type followingFetcher struct{ c *http.Client }

func (followingFetcher) FollowsRedirects() bool { return true }

func (f followingFetcher) Fetch(ctx context.Context, r hub.Request) (*hub.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL, nil)
	if err != nil {
		return nil, err
	}
	if r.Range != "" {
		req.Header.Set("Range", r.Range)
	}
	for k, v := range r.Header {
		req.Header.Set(k, v)
	}
	resp, err := f.c.Do(req)
	if err != nil {
		return nil, err
	}
	h := map[string]string{}
	for k, v := range resp.Header {
		h[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	final := resp.Request.URL.String()
	return &hub.Response{Status: resp.StatusCode, Header: h, Body: resp.Body, URL: final, Redirected: final != r.URL}, nil
}

// With a fetcher that follows redirects (the browser) and the CDN on another
// origin, each shard costs two requests, the 302 and the header read at the
// CDN, as natively: no redirect lookup is made ahead of the read. Counted by
// the hub, across both origins.
func TestFollowingFetcherTwoRequestsAShard(t *testing.T) {
	r := synth.DeepSeekFP8()
	e := newEnv(t, localhub.Options{}, r)
	cdn := httptest.NewUnstartedServer(nil)
	h, err := localhub.New(e.dir, localhub.Options{CDN: "http://" + cdn.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	cdn.Config.Handler = h
	cdn.Start()
	defer cdn.Close()
	hubSrv := httptest.NewServer(h)
	defer hubSrv.Close()

	for _, follow := range []bool{true, false} {
		h.ResetStats()
		var f hub.Fetcher = hub.NewNetFetcher()
		if follow {
			f = followingFetcher{c: &http.Client{}}
		}
		c, err := hub.NewClient(hub.WithEndpoint(hubSrv.URL), hub.WithFetcher(f))
		if err != nil {
			t.Fatal(err)
		}
		ck := loadRemote(t, c.OpenRepo(context.Background(), r.ID, ""))
		configs, shards := 0, 0
		for p := range r.Files {
			switch {
			case strings.HasSuffix(p, ".json"):
				configs++
			case strings.HasSuffix(p, ".safetensors"):
				shards++
			}
		}
		if shards < 2 || len(ck.Shards) != shards {
			t.Fatalf("%d shards read of %d", len(ck.Shards), shards)
		}
		served, _ := h.Stats()
		if want := int64(1 + configs + 2*shards); served != want || c.Stats().Requests != want {
			t.Errorf("following redirects %v: the hub answered %d requests, the client counted %d; want 1 listing + %d configs + 2 × %d shards = %d",
				follow, served, c.Stats().Requests, configs, shards, want)
		}
	}
}
