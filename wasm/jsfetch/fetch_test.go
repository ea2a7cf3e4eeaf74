//go:build js && wasm

package jsfetch

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/wasm/session"
)

// These run under Node (go_js_wasm_exec), started by the native test
// wasm/session.TestWasmUnderNode, which serves a local hub and passes its
// address in QUANTSCOPE_TEST_HUB.
func hubURL(t *testing.T) string {
	u := os.Getenv("QUANTSCOPE_TEST_HUB")
	if u == "" {
		t.Skip("QUANTSCOPE_TEST_HUB is not set: run through wasm/session's TestWasmUnderNode, which starts the hub")
	}
	return u
}

func TestRangeAndRedirect(t *testing.T) {
	base := hubURL(t)
	repo := os.Getenv("QUANTSCOPE_TEST_REPO")
	resp, err := Fetcher{}.Fetch(context.Background(), hub.Request{URL: base + "/" + repo + "/resolve/main/model.safetensors", Range: "bytes=0-7"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 206 || len(b) != 8 || !resp.Redirected || !strings.Contains(resp.URL, "/cdn/") {
		t.Fatalf("status %d, %d bytes, redirected %v, url %s", resp.Status, len(b), resp.Redirected, resp.URL)
	}
	if !strings.HasPrefix(resp.Get("content-range"), "bytes 0-7/") || resp.Get("etag") == "" {
		t.Fatalf("headers %v", resp.Header)
	}
	// A small file is answered in place.
	resp, err = Fetcher{}.Fetch(context.Background(), hub.Request{URL: base + "/" + repo + "/resolve/main/config.json"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var cfg map[string]any
	if resp.Status != 200 || resp.Redirected || json.Unmarshal(b, &cfg) != nil {
		t.Fatalf("config: %d %v %q", resp.Status, resp.Redirected, b)
	}
}

func TestAbort(t *testing.T) {
	base := hubURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	resp, err := Fetcher{}.Fetch(ctx, hub.Request{URL: base + "/slow/repo/resolve/main/config.json"})
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil || time.Since(t0) > 3*time.Second {
		t.Fatalf("slow body: %v after %v", err, time.Since(t0))
	}
}

// The whole inventory pipeline runs in wasm over fetch, unchanged.
func TestSessionOverFetch(t *testing.T) {
	base := hubURL(t)
	repo := os.Getenv("QUANTSCOPE_TEST_REPO")
	want, _ := strconv.ParseUint(os.Getenv("QUANTSCOPE_TEST_PARAMS"), 10, 64)
	s, err := session.Open(context.Background(), repo, session.Options{Endpoint: base, Fetcher: Fetcher{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, err := s.InventoryJSON(false)
	if err != nil {
		t.Fatal(err)
	}
	var inv struct {
		Summary struct{ Parameters uint64 }
		Fetch   struct{ Requests int }
	}
	json.Unmarshal(b, &inv)
	if inv.Summary.Parameters != want || inv.Fetch.Requests == 0 {
		t.Fatalf("parameters %d, want %d; requests %d", inv.Summary.Parameters, want, inv.Fetch.Requests)
	}
	v, err := s.Sample("model.layers.0.mlp.down_proj", 0, 2)
	if err != nil || v.Rows != 2 || len(v.Values) != 2*v.Cols {
		t.Fatalf("sample: %v", err)
	}
}
