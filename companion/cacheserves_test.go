package main

import (
	"testing"

	"github.com/quantscope/quantscope/formats/hub"
)

// The Hugging Face cache holds the hub's repos and $HF_ENDPOINT's (a
// mirror), compared as whole endpoints: another service on the mirror's
// host, or any other server, is read there.
func TestCacheServes(t *testing.T) {
	t.Setenv("HF_ENDPOINT", "https://proxy.corp/hf")
	for endpoint, want := range map[string]bool{
		"https://huggingface.co": true, "https://hf.co": true,
		"https://proxy.corp/hf": true, "https://proxy.corp/hf/": true,
		"https://proxy.corp/other": false, "https://proxy.corp": false, "http://127.0.0.1:8080": false,
	} {
		if got := cacheServes(hub.Spec{Kind: hub.KindRepo, Endpoint: endpoint, Repo: "org/name"}); got != want {
			t.Errorf("cacheServes(%s) = %v, want %v", endpoint, got, want)
		}
	}
}
