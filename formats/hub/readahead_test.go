package hub

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// With WithReadAhead, a stream of band reads (two workers taking bands in
// order, two streams side by side as a module's weight and scales are)
// costs one request in each read-ahead span, every byte as served; reads
// that do not continue one are fetched alone; without the option nothing is
// widened (the page's samples want exactly their bytes).
func TestReadAhead(t *testing.T) {
	data := make([]byte, 24<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		requests.Add(1)
		time.Sleep(2 * time.Millisecond) // a little latency: workers overlap
		http.ServeContent(w, q, "m.safetensors", time.Time{}, bytes.NewReader(data))
	}))
	t.Cleanup(srv.Close)
	stream := func(t *testing.T, opts ...Option) int64 {
		c, err := NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		f := c.NewRemoteFile(context.Background(), srv.URL+"/m.safetensors", "m.safetensors", int64(len(data)))
		requests.Store(0)
		// weights: 16 MiB in 256 KiB bands; scales: 4 MiB from 20 MiB in 16 KiB bands
		const band, sband = 256 << 10, 16 << 10
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, band)
				for {
					i := next.Add(1) - 1
					if i >= 64 {
						return
					}
					if _, err := f.ReadAt(buf, i*band); err != nil || !bytes.Equal(buf, data[i*band:(i+1)*band]) {
						t.Errorf("band %d: %v", i, err)
						return
					}
					sb := buf[:sband]
					off := 20<<20 + i*sband
					if _, err := f.ReadAt(sb, off); err != nil || !bytes.Equal(sb, data[off:off+sband]) {
						t.Errorf("scales band %d: %v", i, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return requests.Load()
	}
	n := stream(t, WithReadAhead(4<<20))
	t.Logf("read-ahead: %d requests for 17 MiB in 128 band reads", n)
	if n > 20 {
		// 16 MiB + 1 MiB at 4 MiB a request, the first band of each stream
		// alone, and a few reads that raced the read ahead
		t.Errorf("a read-ahead stream took %d requests", n)
	}
	if n := stream(t); n < 128 {
		t.Errorf("without read-ahead, %d requests for 128 band reads: widened", n)
	}
	// a lone read is not widened
	c, _ := NewClient(WithReadAhead(4 << 20))
	f := c.NewRemoteFile(context.Background(), srv.URL+"/m.safetensors", "m.safetensors", int64(len(data)))
	requests.Store(0)
	buf := make([]byte, 100)
	f.ReadAt(buf, 1000)
	f.ReadAt(buf, 9<<20)
	if st := c.Stats(); st.Bytes > 2*(16<<10)+2000 || requests.Load() != 2 {
		t.Errorf("two lone reads: %d requests, %d bytes", requests.Load(), st.Bytes)
	}
}
