package hub

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// ReadOnce reads into the caller's buffer, in place, and keeps nothing:
// the same bytes read again are another request (a header's buffer goes
// on to the next shard, so a cached view of it would be another file's
// bytes later). At the end of the file it says io.EOF with what there was.
func TestReadOnce(t *testing.T) {
	const size = 1 << 20
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		requests.Add(1)
		http.ServeContent(w, q, "m.safetensors", time.Time{}, &patternFile{size: size})
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(WithReadAhead(4 << 20))
	if err != nil {
		t.Fatal(err)
	}
	f := c.NewRemoteFile(context.Background(), srv.URL+"/m.safetensors", "m.safetensors", size)
	check := func(buf []byte, off int64) {
		t.Helper()
		for i, b := range buf {
			if b != patternByte(off+int64(i)) {
				t.Fatalf("byte %d: %d, want %d", off+int64(i), b, patternByte(off+int64(i)))
			}
		}
	}
	buf := make([]byte, 300_000)
	n, err := f.ReadOnce(buf, 100)
	if err != nil || n != len(buf) {
		t.Fatalf("ReadOnce: %d bytes, %v", n, err)
	}
	check(buf, 100)
	for i := range buf {
		buf[i] = 0xee // the caller reuses its buffer
	}
	got := make([]byte, 1000)
	if _, err := f.ReadAt(got, 100); err != nil {
		t.Fatal(err)
	}
	check(got, 100) // not served from a cached view of the changed buffer
	if r := requests.Load(); r != 2 {
		t.Errorf("%d requests, want 2: ReadOnce's bytes were kept in the cache", r)
	}
	n, err = f.ReadOnce(buf, size-1000)
	if !errors.Is(err, io.EOF) || n != 1000 {
		t.Fatalf("ReadOnce at the end: %d bytes, %v; want 1000 and io.EOF", n, err)
	}
	check(buf[:n], size-1000)
	if n, err := f.ReadOnce(buf, size); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("ReadOnce past the end: %d bytes, %v; want io.EOF", n, err)
	}
}
