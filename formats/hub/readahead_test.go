package hub

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
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
	stream := func(t *testing.T, band int64, opts ...Option) int64 {
		c, err := NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		f := c.NewRemoteFile(context.Background(), srv.URL+"/m.safetensors", "m.safetensors", int64(len(data)))
		requests.Store(0)
		// weights: 16 MiB in bands; scales: 4 MiB from 20 MiB in 16 KiB bands
		const sband = 16 << 10
		bands := (16 << 20) / band
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, band)
				for {
					i := next.Add(1) - 1
					if i >= bands {
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
	n := stream(t, 256<<10, WithReadAhead(4<<20))
	t.Logf("read-ahead: %d requests for 17 MiB in 128 band reads", n)
	if n > 20 {
		// 16 MiB + 1 MiB at 4 MiB a request, the first band of each stream
		// alone, and a few reads that raced the read ahead
		t.Errorf("a read-ahead stream took %d requests", n)
	}
	// Bands that do not divide the read-ahead (18 rows of a 7168-wide BF16
	// embedding) straddle each block's end: the straddling band takes the
	// block's part and continues from its end, with no request of its own
	// and no byte fetched twice.
	c, _ := NewClient(WithReadAhead(4 << 20))
	f := c.NewRemoteFile(context.Background(), srv.URL+"/m.safetensors", "m.safetensors", int64(len(data)))
	requests.Store(0)
	const odd = 18 * 7168 * 2
	buf := make([]byte, odd)
	for off := int64(0); off+odd <= 16<<20; off += odd {
		if _, err := f.ReadAt(buf, off); err != nil || !bytes.Equal(buf, data[off:off+odd]) {
			t.Fatalf("band at %d: %v", off, err)
		}
	}
	if st := c.Stats(); requests.Load() > 6 || st.Bytes > 16<<20+odd {
		t.Errorf("16 MiB in %d-byte bands: %d requests, %d bytes (want 5: the first band alone, then 4 MiB a request; at most 16 MiB + a band)", odd, requests.Load(), st.Bytes)
	}
	if n := stream(t, 256<<10); n < 128 {
		t.Errorf("without read-ahead, %d requests for 128 band reads: widened", n)
	}
	// a lone read is not widened
	c, _ = NewClient(WithReadAhead(4 << 20))
	f = c.NewRemoteFile(context.Background(), srv.URL+"/m.safetensors", "m.safetensors", int64(len(data)))
	requests.Store(0)
	buf = make([]byte, 100)
	f.ReadAt(buf, 1000)
	f.ReadAt(buf, 9<<20)
	if st := c.Stats(); st.Bytes > 2*(16<<10)+2000 || requests.Load() != 2 {
		t.Errorf("two lone reads: %d requests, %d bytes", requests.Load(), st.Bytes)
	}
	// nor is a read that straddles a block no stream read ahead
	c, _ = NewClient(WithReadAhead(4 << 20))
	f = c.NewRemoteFile(context.Background(), srv.URL+"/m.safetensors", "m.safetensors", int64(len(data)))
	f.ReadAt(buf, 1000)
	big := make([]byte, 20000)
	if _, err := f.ReadAt(big, 10000); err != nil || !bytes.Equal(big, data[10000:30000]) {
		t.Fatalf("read across a cached block's end: %v", err)
	}
	if st := c.Stats(); st.Bytes > 16<<10+20000 {
		t.Errorf("a lone read across a cached block's end: %d bytes fetched, widened to a read ahead", st.Bytes)
	}
}

// patternFile is a large file made up on the fly, byte i patternByte(i).
type patternFile struct {
	size, off int64
}

func (p *patternFile) Read(b []byte) (int, error) {
	if p.off >= p.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(b)), p.size-p.off))
	for i := range n {
		b[i] = patternByte(p.off + int64(i))
	}
	p.off += int64(n)
	return n, nil
}

func (p *patternFile) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
		p.off = off
	case io.SeekCurrent:
		p.off += off
	case io.SeekEnd:
		p.off = p.size + off
	}
	return p.off, nil
}

// A stream reads into the same few read-ahead buffers: blocks the file's
// cache lets go, which no caller was lent, go back to the client. 128 MiB
// streamed allocate about the cache's 40 MiB and a few buffers more, not
// a fresh 4 MiB buffer a request (128 MiB).
func TestReadAheadReusesBuffers(t *testing.T) {
	const size = 128 << 20
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		http.ServeContent(w, q, "m.safetensors", time.Time{}, &patternFile{size: size})
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(WithReadAhead(4 << 20))
	if err != nil {
		t.Fatal(err)
	}
	f := c.NewRemoteFile(context.Background(), srv.URL+"/m.safetensors", "m.safetensors", size)
	const band = 18 * 7168 * 2
	buf := make([]byte, band)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for off := int64(0); off < size; off += band {
		n, err := f.ReadAt(buf, off)
		if err != nil && !(errors.Is(err, io.EOF) && off+int64(n) == size) {
			t.Fatalf("band at %d: %v", off, err)
		}
		for i := range n {
			if buf[i] != patternByte(off+int64(i)) {
				t.Fatalf("byte %d: %d, want %d", off+int64(i), buf[i], patternByte(off+int64(i)))
			}
		}
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("128 MiB streamed: %.1f MiB allocated", float64(alloc)/(1<<20))
	if alloc > cacheLimit+16<<20 {
		t.Errorf("streaming 128 MiB allocated %.1f MiB: read-ahead buffers not reused", float64(alloc)/(1<<20))
	}
}

// A stream read with ReadAtWithin keeps prefetchDepth blocks in flight
// ahead of its readers (one worker here, so every request beyond the first
// in flight at once is a prefetch) and reads nothing past the stream's
// end; plain ReadAt (the page's engine, a lone read) prefetches nothing.
func TestPrefetch(t *testing.T) {
	const size = 64 << 20
	var inflight, most, bytesOut atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		if start, end, ok := parseRangeHeader(q.Header.Get("Range")); ok {
			bytesOut.Add(end - start + 1)
		}
		http.ServeContent(w, q, "m.safetensors", time.Time{}, &patternFile{size: size})
	}))
	t.Cleanup(srv.Close)
	const band = 18 * 7168 * 2
	const from, to = 1 << 20, 1<<20 + 100*band // a 26 MB tensor inside the file
	stream := func(within bool) {
		c, err := NewClient(WithReadAhead(4 << 20))
		if err != nil {
			t.Fatal(err)
		}
		f := c.NewRemoteFile(context.Background(), srv.URL+"/m.safetensors", "m.safetensors", size)
		most.Store(0)
		bytesOut.Store(0)
		buf := make([]byte, band)
		for off := int64(from); off < to; off += band {
			var err error
			if within {
				_, err = f.ReadAtWithin(buf, off, to)
			} else {
				_, err = f.ReadAt(buf, off)
			}
			if err != nil {
				t.Fatalf("band at %d: %v", off, err)
			}
			for i := range buf {
				if buf[i] != patternByte(off+int64(i)) {
					t.Fatalf("byte %d: %d, want %d", off+int64(i), buf[i], patternByte(off+int64(i)))
				}
			}
		}
		// let prefetches still in flight land before the counts are read
		for deadline := time.Now().Add(5 * time.Second); inflight.Load() > 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	stream(true)
	t.Logf("ReadAtWithin: at most %d requests at once, %d bytes for a %d-byte stream", most.Load(), bytesOut.Load(), to-from)
	if most.Load() < 3 || most.Load() > prefetchDepth+1 {
		t.Errorf("ReadAtWithin: at most %d requests in flight at once, want 3..%d", most.Load(), prefetchDepth+1)
	}
	if bytesOut.Load() != to-from {
		t.Errorf("ReadAtWithin: %d bytes fetched for a %d-byte stream", bytesOut.Load(), to-from)
	}
	stream(false)
	if most.Load() != 1 {
		t.Errorf("ReadAt: %d requests in flight at once from one reader: prefetched", most.Load())
	}
}

// A module's weight and its scales are two streams side by side (here
// NVFP4-shaped: 3584 and 448 bytes a row, 16-row bands claimed by several
// workers), both read with ReadAtWithin. Each reads ahead and prefetches
// without pushing the other's blocks, or its own still being read, out of
// the cache: the bytes fetched stay near the bytes needed, and the scales'
// bands (7 KiB, under the first read's 16 KiB) still make a stream rather
// than a request every two bands.
func TestTwoStreamsPrefetch(t *testing.T) {
	const rows, wRow, sRow = 16384, 3584, 448
	const wOff = int64(1 << 20)
	const sOff = wOff + rows*wRow
	const size = sOff + rows*sRow + 4096
	var reqs, bytesOut atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		reqs.Add(1)
		time.Sleep(5 * time.Millisecond)
		if start, end, ok := parseRangeHeader(q.Header.Get("Range")); ok {
			bytesOut.Add(end - start + 1)
		}
		http.ServeContent(w, q, "m", time.Time{}, &patternFile{size: size})
	}))
	t.Cleanup(srv.Close)
	check := func(b []byte, off int64) bool {
		for i := range b {
			if b[i] != patternByte(off+int64(i)) {
				return false
			}
		}
		return true
	}
	for _, workers := range []int{2, 4} {
		c, _ := NewClient(WithReadAhead(4 << 20))
		f := c.NewRemoteFile(context.Background(), srv.URL+"/m", "m", size)
		reqs.Store(0)
		bytesOut.Store(0)
		const band = 16
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wb, sb := make([]byte, band*wRow), make([]byte, band*sRow)
				for {
					lo := next.Add(band) - band
					if lo >= rows {
						return
					}
					if _, err := f.ReadAtWithin(wb, wOff+lo*wRow, sOff); err != nil || !check(wb, wOff+lo*wRow) {
						t.Errorf("weight rows %d: %v", lo, err)
						return
					}
					if _, err := f.ReadAtWithin(sb, sOff+lo*sRow, sOff+rows*sRow); err != nil || !check(sb, sOff+lo*sRow) {
						t.Errorf("scale rows %d: %v", lo, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			f.mu.Lock()
			idle := len(f.pending) == 0
			f.mu.Unlock()
			if idle {
				break
			}
		}
		need := int64(rows * (wRow + sRow))
		t.Logf("%d workers: %d requests, %d bytes fetched for %d needed (%.2f×)", workers, reqs.Load(), bytesOut.Load(), need, float64(bytesOut.Load())/float64(need))
		// 16 blocks of 4 MiB (and a few more where a band straddles two
		// streams' blocks), where a stream of small bands not taken for one
		// made 160-1000 requests
		if bytesOut.Load() > need*5/4 || reqs.Load() > need/(4<<20)+8 {
			t.Errorf("%d workers: %d requests and %d bytes for two streams of %d bytes (want about one request a 4 MiB block and under 1.25× the bytes)", workers, reqs.Load(), bytesOut.Load(), need)
		}
	}
}

// A worker that takes a later band first reads ahead from there; the band
// before it is then read up to where those bytes begin, not again over
// them: a 90-row slice read band 1 first, then band 0, fetches each byte
// once.
func TestReadAheadOutOfOrder(t *testing.T) {
	const size = 4 << 20
	var bytesOut atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		if start, end, ok := parseRangeHeader(q.Header.Get("Range")); ok {
			bytesOut.Add(end - start + 1)
		}
		http.ServeContent(w, q, "m", time.Time{}, &patternFile{size: size})
	}))
	t.Cleanup(srv.Close)
	c, _ := NewClient(WithReadAhead(4 << 20))
	f := c.NewRemoteFile(context.Background(), srv.URL+"/m", "m", size)
	const row, band, from = 3584, 18, 1000
	end := int64(from + 90*row)
	buf := make([]byte, band*row)
	for _, b := range []int64{1, 0, 2, 4, 3} {
		off := from + b*band*row
		if _, err := f.ReadAtWithin(buf, off, end); err != nil {
			t.Fatalf("band %d: %v", b, err)
		}
		for i := range buf {
			if buf[i] != patternByte(off+int64(i)) {
				t.Fatalf("band %d, byte %d wrong", b, i)
			}
		}
	}
	if got := bytesOut.Load(); got != 90*row {
		t.Errorf("%d bytes fetched for a %d-byte slice read out of order", got, 90*row)
	}
}
