package checkpoint

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/safetensors"
)

// A bare URL's size is unknown until its first read, which takes the
// client's 100 KB prefix into the file's cache; the header is then read
// from there, not fetched again.
func TestURLHeaderIsOneRequest(t *testing.T) {
	b, err := safetensors.Encode([]safetensors.WriteTensor{{Name: "w.weight", DType: safetensors.BF16, Shape: []uint64{4}, Data: make([]byte, 8)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var gets atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		http.ServeContent(w, r, "m.safetensors", time.Time{}, bytes.NewReader(b))
	}))
	defer srv.Close()
	c, err := hub.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	ck, err := Load(context.Background(), c.OpenURL(context.Background(), srv.URL+"/m.safetensors"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if n := gets.Load(); n != 1 {
		t.Errorf("%d requests for a %d-byte file's header, want 1", n, len(b))
	}
	if len(ck.Shards) != 1 || len(ck.Shards[0].Header.Tensors) != 1 || ck.Shards[0].Header.Tensors[0].Name != "w.weight" {
		t.Errorf("header: %+v", ck.Shards[0].Header)
	}
}
