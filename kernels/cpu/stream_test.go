package cpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quantscope/quantscope/kernels"
)

// genSource is a synthetic matrix: value (r, c) = f(r, c), computed on demand,
// so a module far larger than memory can be streamed.
type genSource struct {
	rows, cols int
	f          func(r, c int) float32
	started    atomic.Int64
	failAt     int // a band starting at this row fails (when > 0)
	onDecode   func()
}

func (g *genSource) Shape() (int, int)              { return g.rows, g.cols }
func (g *genSource) NewDecoder() kernels.RowDecoder { return genDecoder{g} }

type genDecoder struct{ g *genSource }

var errBand = errors.New("band failed")

func (d genDecoder) Decode(dst []float32, lo, hi int, meta *kernels.BandMeta) error {
	g := d.g
	g.started.Add(1)
	if g.onDecode != nil {
		g.onDecode()
	}
	if g.failAt > 0 && lo == g.failAt {
		return errBand
	}
	for r := lo; r < hi; r++ {
		for c := range g.cols {
			dst[(r-lo)*g.cols+c] = g.f(r, c)
		}
	}
	if meta != nil {
		meta.Codes += int64((hi - lo) * g.cols)
	}
	return nil
}

func rowValue(r, c int) float32 { return float32(r*1000 + c) }

// Bands come back in row order, whole, and progress ends at the total.
func TestDequantizeOrderAndProgress(t *testing.T) {
	for _, workers := range []int{1, 2, 5} {
		src := &genSource{rows: 1001, cols: 37, f: rowValue}
		var last, calls int64
		next := 0
		err := (&Backend{Workers: workers}).Dequantize(context.Background(), src, kernels.DequantOptions{
			ChunkBytes: 37 * 4 * 7, // 7 rows a band
			Progress: func(done, total int64) {
				if done < last || total != 1001 {
					t.Errorf("progress %d/%d after %d", done, total, last)
				}
				last = done
				calls++
			},
		}, func(b *kernels.Band) error {
			if b.Lo != next || b.Hi > 1001 || len(b.Values) != (b.Hi-b.Lo)*37 {
				t.Fatalf("workers %d: band [%d, %d) with %d values, want it to start at %d", workers, b.Lo, b.Hi, len(b.Values), next)
			}
			for i, v := range b.Values {
				if want := rowValue(b.Lo+i/37, i%37); v != want {
					t.Fatalf("band %d value %d = %v, want %v", b.Lo, i, v, want)
				}
			}
			next = b.Hi
			return nil
		})
		if err != nil || next != 1001 || last != 1001 || calls != 143 {
			t.Fatalf("workers %d: err %v, rows %d, progress %d in %d calls", workers, err, next, last, calls)
		}
	}
}

// A cancel stops the stream within the bands being decoded: no band is
// handed out after it, nothing more reaches the sink, and the error says so.
func TestDequantizeCancel(t *testing.T) {
	const workers = 3
	src := &genSource{rows: 10000, cols: 64, f: rowValue}
	ctx, cancel := context.WithCancel(context.Background())
	var atCancel int64
	sinks := 0
	err := (&Backend{Workers: workers}).Dequantize(ctx, src, kernels.DequantOptions{ChunkBytes: 64 * 4}, func(b *kernels.Band) error {
		sinks++
		if sinks == 5 {
			atCancel = src.started.Load()
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if sinks != 5 {
		t.Errorf("sink called %d times, cancelled at the 5th", sinks)
	}
	// Workers that had passed their check when the cancel came may finish
	// their band; none starts another.
	if after := src.started.Load() - atCancel; after > workers {
		t.Errorf("%d bands started after the cancel, want at most %d", after, workers)
	}
}

func TestDequantizeErrors(t *testing.T) {
	src := &genSource{rows: 100, cols: 8, f: rowValue, failAt: 40}
	err := (&Backend{Workers: 2}).Dequantize(context.Background(), src, kernels.DequantOptions{ChunkBytes: 8 * 4 * 10}, func(*kernels.Band) error { return nil })
	if !errors.Is(err, errBand) {
		t.Fatalf("decode error: got %v", err)
	}
	errSink := errors.New("disk full")
	src = &genSource{rows: 100, cols: 8, f: rowValue}
	err = (&Backend{Workers: 2}).Dequantize(context.Background(), src, kernels.DequantOptions{ChunkBytes: 8 * 4 * 10}, func(b *kernels.Band) error {
		if b.Lo == 50 {
			return errSink
		}
		return nil
	})
	if !errors.Is(err, errSink) {
		t.Fatalf("sink error: got %v", err)
	}
	// Zero rows: nothing to do, no error.
	if err := (&Backend{Workers: 2}).Dequantize(context.Background(), &genSource{cols: 8}, kernels.DequantOptions{}, func(*kernels.Band) error {
		t.Fatal("sink called for no rows")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// The working set stays within the stated bound while a matrix 64 times
// its size streams through: measured as the bytes allocated during the
// whole stream and as the peak heap in use, sampled in the sink.
func TestDequantizeMemoryBound(t *testing.T) {
	const rows, cols, chunk, workers = 16384, 1024, 256 << 10, 2 // 64 MiB of output
	src := &genSource{rows: rows, cols: cols, f: func(r, c int) float32 { return float32(c) }}
	bound := uint64(3 * workers * chunk) // bandsPerWorker bands a worker; genSource keeps no scratch
	runtime.GC()
	var before, now runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak uint64
	bands := 0
	err := (&Backend{Workers: workers}).Dequantize(context.Background(), src, kernels.DequantOptions{ChunkBytes: chunk}, func(b *kernels.Band) error {
		if bands%16 == 0 {
			runtime.ReadMemStats(&now)
			peak = max(peak, now.HeapAlloc)
		}
		bands++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&now)
	allocated := now.TotalAlloc - before.TotalAlloc
	output := uint64(rows * cols * 4)
	if allocated > bound+1<<20 {
		t.Errorf("streaming %d MiB allocated %d KiB, bound %d KiB", output>>20, allocated>>10, bound>>10)
	}
	if peak > before.HeapAlloc+bound+1<<20 {
		t.Errorf("peak heap %d KiB above the start, bound %d KiB", (peak-before.HeapAlloc)>>10, bound>>10)
	}
	if output < 32*bound {
		t.Fatalf("test too small: output %d, bound %d", output, bound)
	}
}

// plainStats is the reference: two passes over the whole slice.
func plainStats(v []float32) (n int64, lo, hi, mean, std float64, nan, inf int64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	var sum float64
	for _, x := range v {
		f := float64(x)
		switch {
		case f != f:
			nan++
		case math.IsInf(f, 0):
			inf++
		default:
			n++
			sum += f
			lo, hi = math.Min(lo, f), math.Max(hi, f)
		}
	}
	mean = sum / float64(n)
	var sq float64
	for _, x := range v {
		if f := float64(x); f == f && !math.IsInf(f, 0) {
			sq += (f - mean) * (f - mean)
		}
	}
	return n, lo, hi, mean, math.Sqrt(sq / float64(n)), nan, inf
}

// PlainHistogram counts v into the bins of edges by the documented rule: a
// value on an interior edge belongs to the bin farther from zero, zero to
// the bin above it, the outer bins hold min and max.
func PlainHistogram(v []float32, edges []float64) []int64 {
	nb := len(edges) - 1
	counts := make([]int64, nb)
	for _, x := range v {
		f := float64(x)
		if f != f || math.IsInf(f, 0) {
			continue
		}
		i := 0
		if f >= 0 {
			for i+1 < nb && edges[i+1] <= f {
				i++
			}
		} else {
			for i+1 < nb && edges[i+1] < f {
				i++
			}
		}
		counts[i]++
	}
	return counts
}

func TestStatsAgainstPlain(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	special := []float32{nan, inf, -inf, 0, float32(math.Copysign(0, -1)), 0.5, -0.5, 0.25, -0.25, 1e-30, -3, 3}
	f := func(r, c int) float32 {
		k := r*131 + c
		if k%97 == 0 {
			return special[(k/97)%len(special)]
		}
		return float32(math.Sin(float64(k))*0.7 + 0.05*float64(k%5))
	}
	src := &genSource{rows: 300, cols: 129, f: f}
	all := make([]float32, 0, 300*129)
	for r := range 300 {
		for c := range 129 {
			all = append(all, f(r, c))
		}
	}
	for _, bins := range []int{1, 7, 64, 1000} {
		st, err := (&Backend{Workers: 3}).Stats(context.Background(), src, kernels.StatsOptions{Bins: bins, ChunkBytes: 129 * 4 * 11})
		if err != nil {
			t.Fatal(err)
		}
		n, lo, hi, mean, std, nn, ni := plainStats(all)
		if st.Count != n || st.Min != lo || st.Max != hi || st.NaN != nn || st.Inf != ni {
			t.Fatalf("bins %d: %+v, want n %d min %v max %v nan %d inf %d", bins, st, n, lo, hi, nn, ni)
		}
		if math.Abs(st.Mean-mean) > 1e-12 || math.Abs(st.Std-std) > 1e-12*std {
			t.Fatalf("mean %v std %v, want %v %v", st.Mean, st.Std, mean, std)
		}
		e := st.Histogram.Edges
		if len(e) < 2 || len(e)-1 > bins || e[0] != lo || e[len(e)-1] != hi {
			t.Fatalf("bins %d: edges %v", bins, e)
		}
		for i := 1; i < len(e); i++ {
			if e[i] <= e[i-1] {
				t.Fatalf("edges not increasing: %v", e)
			}
		}
		want := PlainHistogram(all, e)
		for i := range want {
			if want[i] != st.Histogram.Counts[i] {
				t.Fatalf("bins %d: bin %d [%v, %v] holds %d, plain count %d", bins, i, e[i], e[i+1], st.Histogram.Counts[i], want[i])
			}
		}
		if bins >= 64 && len(e)-1 < bins/2 {
			t.Errorf("asked for %d bins, got %d", bins, len(e)-1)
		}
	}
}

// The streamed moments hold up where a one-pass sum of squares would not:
// a large offset with a small spread.
func TestStatsNumericallySound(t *testing.T) {
	src := &genSource{rows: 2000, cols: 1000, f: func(r, c int) float32 { return 1e4 + float32((r+c)%3) }}
	st, err := (&Backend{Workers: 2}).Stats(context.Background(), src, kernels.StatsOptions{ChunkBytes: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	all := make([]float32, 0, 2000*1000)
	for r := range 2000 {
		for c := range 1000 {
			all = append(all, src.f(r, c))
		}
	}
	_, _, _, mean, std, _, _ := plainStats(all)
	if math.Abs(st.Mean-mean) > 1e-9 || math.Abs(st.Std-std) > 1e-9 {
		t.Fatalf("mean %v std %v, plain %v %v", st.Mean, st.Std, mean, std)
	}
}

func TestStatsEdgeCases(t *testing.T) {
	st, err := New().Stats(context.Background(), &genSource{rows: 3, cols: 4, f: func(int, int) float32 { return 2.5 }}, kernels.StatsOptions{})
	if err != nil || st.Min != 2.5 || st.Max != 2.5 || st.Std != 0 || len(st.Histogram.Counts) != 1 || st.Histogram.Counts[0] != 12 {
		t.Fatalf("constant: %+v %v", st, err)
	}
	st, err = New().Stats(context.Background(), &genSource{rows: 3, cols: 4, f: func(int, int) float32 { return float32(math.NaN()) }}, kernels.StatsOptions{})
	if err != nil || st.NaN != 12 || st.Count != 0 || !math.IsNaN(st.Mean) || len(st.Histogram.Counts) != 0 {
		t.Fatalf("all NaN: %+v %v", st, err)
	}
	if !math.IsNaN(st.ScaleAtMaxFraction) {
		t.Fatalf("no E4M3 scales, fraction %v", st.ScaleAtMaxFraction)
	}
}

// A source with no values (rows of no columns, or no rows) gives no bands
// and decodes nothing: 2^45 empty bands once took minutes.
func TestDequantizeEmpty(t *testing.T) {
	for _, shape := range [][2]int{{1 << 50, 0}, {0, 1 << 20}} {
		g := &genSource{rows: shape[0], cols: shape[1], f: rowValue}
		bands := 0
		err := New().Dequantize(context.Background(), g, kernels.DequantOptions{}, func(*kernels.Band) error { bands++; return nil })
		if err != nil || bands != 0 || g.started.Load() != 0 {
			t.Errorf("%v: %v, %d bands, %d decodes", shape, err, bands, g.started.Load())
		}
	}
}

// The moments do not depend on which worker took which band: each band's
// are merged in row order, so any number of workers, run after run, gives
// the same mean and standard deviation to the last bit (the page's
// companion and the command line show the same digits).
func TestStatsDeterministic(t *testing.T) {
	f := func(r, c int) float32 {
		return float32(math.Sin(float64(r*131+c)*0.37))*0.02 + float32(r%7)*1e-4
	}
	var want *kernels.Stats
	for i, workers := range []int{1, 2, 3, 5, 5, 5, 2, 5} {
		src := &genSource{rows: 2003, cols: 61, f: f}
		opt := kernels.StatsOptions{ChunkBytes: 61 * 4 * 3}
		if i >= 6 { // with an ordered sink, which holds the bands instead of their moments
			opt.Sink = func(*kernels.Band) error { return nil }
		}
		got, err := (&Backend{Workers: workers}).Stats(context.Background(), src, opt)
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = got
			continue
		}
		if math.Float64bits(got.Mean) != math.Float64bits(want.Mean) || math.Float64bits(got.Std) != math.Float64bits(want.Std) || got.Min != want.Min || got.Max != want.Max {
			t.Fatalf("workers %d: mean %v std %v, one worker %v %v", workers, got.Mean, got.Std, want.Mean, want.Std)
		}
	}
}

// With no sink the bands go to Each in any order, each exactly once and
// whole; progress never goes back and ends at the total; and no band waits
// for the one before it: here the first band's decode stalls until every
// other band is done, which in row order could never finish.
func TestDequantizeUnordered(t *testing.T) {
	for _, workers := range []int{1, 2, 5} {
		const rows, cols = 1001, 37
		stall := make(chan struct{})
		var others atomic.Int64
		src := &genSource{rows: rows, cols: cols, f: rowValue}
		nb := int64((rows + 6) / 7)
		var mu sync.Mutex
		seen := make([]bool, rows)
		var last int64
		var calls int
		stalled := &stallSource{genSource: src, stall: stall, active: workers > 1}
		err := (&Backend{Workers: workers}).Dequantize(context.Background(), stalled, kernels.DequantOptions{
			ChunkBytes: cols * 4 * 7,
			Progress: func(done, total int64) {
				if done < last || total != rows {
					t.Errorf("progress %d/%d after %d", done, total, last)
				}
				last = done
				calls++
			},
			Each: func(_ int, b *kernels.Band) error {
				for i, v := range b.Values {
					if want := rowValue(b.Lo+i/cols, i%cols); v != want {
						return fmt.Errorf("band %d value %d = %v, want %v", b.Lo, i, v, want)
					}
				}
				mu.Lock()
				for r := b.Lo; r < b.Hi; r++ {
					if seen[r] {
						t.Errorf("row %d handed over twice", r)
					}
					seen[r] = true
				}
				mu.Unlock()
				if b.Lo != 0 && others.Add(1) == nb-1 {
					close(stall)
				}
				return nil
			},
		}, nil)
		if err != nil || last != rows || calls != int(nb) {
			t.Fatalf("workers %d: err %v, progress %d in %d calls", workers, err, last, calls)
		}
		for r, ok := range seen {
			if !ok {
				t.Fatalf("workers %d: row %d never handed over", workers, r)
			}
		}
	}
}

// stallSource holds the decode of the band at row 0 until stall closes (or
// fails it after 10 s, so that a stream that waits for it in row order
// fails the test instead of hanging it).
type stallSource struct {
	*genSource
	stall  chan struct{}
	active bool
}

func (s *stallSource) NewDecoder() kernels.RowDecoder {
	return stallDecoder{genDecoder{s.genSource}, s}
}

type stallDecoder struct {
	genDecoder
	s *stallSource
}

func (d stallDecoder) Decode(dst []float32, lo, hi int, meta *kernels.BandMeta) error {
	if lo == 0 && d.s.active {
		select {
		case <-d.s.stall:
		case <-time.After(10 * time.Second):
			return errors.New("band 0 stalled 10 s: the other bands waited for it")
		}
	}
	return d.genDecoder.Decode(dst, lo, hi, meta)
}

// Without a sink, a cancel and an error stop the stream as they do with
// one, and its working set keeps the same bound.
func TestDequantizeUnorderedStops(t *testing.T) {
	const workers = 3
	src := &genSource{rows: 10000, cols: 64, f: rowValue}
	ctx, cancel := context.WithCancel(context.Background())
	var atCancel int64
	var n atomic.Int64
	each := func(_ int, b *kernels.Band) error {
		if n.Add(1) == 5 {
			atCancel = src.started.Load()
			cancel()
		}
		return nil
	}
	err := (&Backend{Workers: workers}).Dequantize(ctx, src, kernels.DequantOptions{ChunkBytes: 64 * 4, Each: each}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if after := src.started.Load() - atCancel; after > workers {
		t.Errorf("%d bands started after the cancel, want at most %d", after, workers)
	}
	errDisk := errors.New("disk full")
	err = (&Backend{Workers: 2}).Dequantize(context.Background(), &genSource{rows: 100, cols: 8, f: rowValue}, kernels.DequantOptions{
		ChunkBytes: 8 * 4 * 10,
		Each: func(_ int, b *kernels.Band) error {
			if b.Lo == 50 {
				return errDisk
			}
			return nil
		}}, nil)
	if !errors.Is(err, errDisk) {
		t.Fatalf("Each's error: got %v", err)
	}
	err = (&Backend{Workers: 2}).Dequantize(context.Background(), &genSource{rows: 100, cols: 8, f: rowValue, failAt: 40}, kernels.DequantOptions{
		ChunkBytes: 8 * 4 * 10, Each: func(int, *kernels.Band) error { return nil }}, nil)
	if !errors.Is(err, errBand) {
		t.Fatalf("decode error: got %v", err)
	}

	const rows, cols, chunk = 16384, 1024, 256 << 10 // 64 MiB of output
	big := &genSource{rows: rows, cols: cols, f: func(r, c int) float32 { return float32(c) }}
	bound := uint64(1 * 2 * chunk) // one band a worker with no sink
	runtime.GC()
	var before, now runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	var bands atomic.Int64
	err = (&Backend{Workers: 2}).Dequantize(context.Background(), big, kernels.DequantOptions{ChunkBytes: chunk, Each: func(int, *kernels.Band) error {
		if bands.Add(1)%16 == 0 {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			for p := peak.Load(); m.HeapAlloc > p && !peak.CompareAndSwap(p, m.HeapAlloc); p = peak.Load() {
			}
		}
		return nil
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&now)
	if allocated := now.TotalAlloc - before.TotalAlloc; allocated > bound+1<<20 {
		t.Errorf("streaming 64 MiB allocated %d KiB, bound %d KiB", allocated>>10, bound>>10)
	}
	if p := peak.Load(); p > before.HeapAlloc+bound+1<<20 {
		t.Errorf("peak heap %d KiB above the start, bound %d KiB", (p-before.HeapAlloc)>>10, bound>>10)
	}
}
