package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/quantscope/quantscope/companion/proto"
)

// $HF_TOKEN goes to the hub the user set up ($HF_ENDPOINT, an --endpoint
// they typed), never to a hub that a page's job or a URL SOURCE names: a
// server that records the Authorization it is sent must not see it. A token
// the job sends itself goes with it.
func TestEnvTokenStaysHome(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		s := seen
		seen = nil
		return s
	}
	t.Setenv("HF_TOKEN", "hf_secret")
	t.Setenv("HF_ENDPOINT", "")
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	ctx := context.Background()
	cases := []struct {
		name string
		load func() error
		want string // the Authorization the server must see on every request
	}{
		{"a job naming its own endpoint", func() error {
			_, err := loadSubmit(ctx, proto.Submit{Source: "org/name", Endpoint: srv.URL}, "", nil)
			return err
		}, ""},
		{"a job naming a hub URL", func() error {
			_, err := loadSubmit(ctx, proto.Submit{Source: srv.URL + "/org/name/tree/main"}, "", nil)
			return err
		}, ""},
		{"a command line SOURCE URL on another hub", func() error {
			_, err := resolveSourceList(ctx, srv.URL+"/org/name/tree/main", sourceFlags{})
			return err
		}, ""},
		{"a job with its own hub_token", func() error {
			_, err := loadSubmit(ctx, proto.Submit{Source: "org/name", Endpoint: srv.URL, HubToken: "hf_job"}, "", nil)
			return err
		}, "Bearer hf_job"},
		{"an --endpoint typed on the command line", func() error {
			_, err := resolveSourceList(ctx, "org/name", sourceFlags{endpoint: srv.URL})
			return err
		}, "Bearer hf_secret"},
	}
	for _, c := range cases {
		err := c.load()
		got := take()
		if err == nil || len(got) == 0 {
			t.Fatalf("%s: %v after %d requests; want the hub's 404 after at least one", c.name, err, len(got))
		}
		for _, a := range got {
			if a != c.want {
				t.Errorf("%s: the server was sent Authorization %q, want %q", c.name, a, c.want)
			}
		}
	}
	t.Setenv("HF_ENDPOINT", srv.URL)
	if _, err := loadSubmit(ctx, proto.Submit{Source: "org/name"}, "", nil); err == nil {
		t.Fatal("a job on $HF_ENDPOINT: loaded from a hub that answers 404")
	}
	got := take()
	if len(got) == 0 {
		t.Fatal("a job on $HF_ENDPOINT: no request reached it")
	}
	for _, a := range got {
		if a != "Bearer hf_secret" {
			t.Errorf("a job on $HF_ENDPOINT: Authorization %q, want the user's token", a)
		}
	}
}

// resolveSourceList resolves a SOURCE and lists it, as a command does first.
func resolveSourceList(ctx context.Context, source string, sf sourceFlags) (any, error) {
	src, err := resolveSource(ctx, source, sf)
	if err != nil {
		return nil, err
	}
	return src.List(ctx)
}
