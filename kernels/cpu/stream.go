package cpu

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/quantscope/quantscope/kernels"
)

// Dequantize decodes src in bands of rows on every worker and hands them to
// sink in row order. With a nil sink (opt.Each does the work) no band waits
// for the ones before it.
//
// Working set: each worker owns bandsPerWorker (3) bands, each of about
// opt.ChunkBytes of float32 output (at least one row), and its decoder keeps
// scratch for one band's stored bytes and scale rows (no more than the
// band's output for any stored format). So the bound is about
// 4·Workers·ChunkBytes (with the default 512 KiB chunks and 16 workers, 32
// MiB), whatever the module's size; with a nil sink one band a worker, so
// about 2·Workers·ChunkBytes. Nothing is allocated per band, and the bands
// are kept for the next stream (bandPool).
func (b *Backend) Dequantize(ctx context.Context, src kernels.RowSource, opt kernels.DequantOptions, sink func(*kernels.Band) error) error {
	return b.stream(ctx, src, opt.ChunkBytes, opt.WantMeta, opt.Progress, opt.Each, sink)
}

func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// stream is the pipeline under Dequantize and Stats. Each worker owns a few
// bands; it claims the next band index (an atomic counter, so no goroutine
// hands work out), decodes into one of its own bands and runs
// work(worker, band) on it, then offers the band for delivery. Whichever
// worker completes the prefix of bands in row order delivers them: it calls
// sink and reports progress for each, outside the lock, and sends the band
// back to the worker that owns it. There is no dispatcher or collector
// goroutine: on a 2-core VM their wake-ups (a futex per band) left the
// second core idle a third of the time. ctx is checked before each band is
// claimed and before each is delivered, so a cancel stops every worker
// within the band it is decoding and nothing reaches the sink after it.
//
// With a nil sink nothing needs the bands in order, and a band goes home as
// soon as work is done with it. Holding bands for order costs more than
// memory on a VM: a vCPU the host stalls for a few hundred microseconds
// holds the next band, the other worker decodes its three bands ahead and
// then waits too (0.2-1 ms a 256 MiB stream on the 2-core VM, a tenth of
// the two-core time).
func (b *Backend) stream(ctx context.Context, src kernels.RowSource, chunk int, meta bool, progress kernels.Progress,
	work func(worker int, band *kernels.Band) error, sink func(*kernels.Band) error) error {
	rows, cols := src.Shape()
	if rows <= 0 || cols <= 0 { // no values: no bands (a [2^62, 0] weight is 2^45 empty ones)
		return ctx.Err()
	}
	per := kernels.BandRows(cols, chunk)
	nb := (rows + per - 1) / per
	workers := min(b.workers(), nb)
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	d := &deliverer{ring: make([]owned, workers*bandsPerWorker), sink: sink, progress: progress, rows: rows, cancel: cancel, ctx: ctx}
	var claim atomic.Int64
	homes := make([]*homeBands, workers)
	run := func(w int) {
		home := &homeBands{wake: make(chan struct{}, 1)}
		homes[w] = home
		own := bandsPerWorker
		if sink == nil {
			own = 1 // a band comes home as soon as its work is done
		}
		for range own {
			band, _ := bandPool.Get().(*kernels.Band)
			if band == nil {
				band = new(kernels.Band)
			}
			band.Cols = cols
			home.put(band)
		}
		dec := src.NewDecoder()
		defer kernels.Release(dec)
		for {
			band := home.get(ctx)
			if band == nil {
				return
			}
			i := int(claim.Add(1) - 1)
			if i >= nb || ctx.Err() != nil {
				home.put(band)
				return
			}
			band.Lo, band.Hi = i*per, min((i+1)*per, rows)
			band.Values = grow(band.Values, (band.Hi-band.Lo)*cols)
			var m *kernels.BandMeta
			if meta {
				band.Meta.Reset()
				m = &band.Meta
			}
			err := dec.Decode(band.Values, band.Lo, band.Hi, m)
			if err == nil && work != nil {
				err = work(w, band)
			}
			if err != nil {
				home.put(band)
				d.fail(err)
				return
			}
			if sink == nil {
				home.put(band)
				d.done(band.Hi - band.Lo)
				continue
			}
			d.offer(i, owned{band, home})
		}
	}
	// The calling goroutine is worker 0: one goroutine fewer to wake.
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Go(func() { run(w) })
	}
	run(0)
	wg.Wait()
	// Every worker has stopped: the bands are home or, after an error, left
	// in the ring. Keep them for the next stream.
	for _, home := range homes {
		for _, band := range home.free {
			bandPool.Put(band)
		}
	}
	for _, o := range d.ring {
		if o.band != nil {
			bandPool.Put(o.band)
		}
	}
	first := d.first
	switch {
	case first != nil && parent.Err() != nil:
		return parent.Err()
	case first != nil:
		return first
	case sink == nil && d.bandsDone < nb, sink != nil && d.next < nb:
		if err := parent.Err(); err != nil {
			return err
		}
		return errors.New("cpu: stream ended early")
	}
	return nil
}

// bandPool keeps bands between streams, so that a stream of a small module
// allocates nothing once the pool has grown.
var bandPool sync.Pool

// bandsPerWorker is how many bands each worker owns: one being decoded and
// two waiting for delivery while a slower worker finishes the band before
// them.
const bandsPerWorker = 3

// owned is a decoded band and the worker's home it goes back to.
type owned struct {
	band *kernels.Band
	home *homeBands
}

// homeBands holds a worker's free bands as a stack: the band delivered
// last, still in the core's cache, is the one decoded into next (a FIFO
// would cycle every band through the cache).
type homeBands struct {
	mu   sync.Mutex
	free []*kernels.Band
	wake chan struct{} // a band came home (capacity 1)
}

func (h *homeBands) put(b *kernels.Band) {
	h.mu.Lock()
	h.free = append(h.free, b)
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// get takes the band that came home last, waiting for one; nil once ctx is
// done.
func (h *homeBands) get(ctx context.Context) *kernels.Band {
	for {
		h.mu.Lock()
		if n := len(h.free); n > 0 {
			b := h.free[n-1]
			h.free = h.free[:n-1]
			h.mu.Unlock()
			return b
		}
		h.mu.Unlock()
		select {
		case <-h.wake:
		case <-ctx.Done():
			return nil
		}
	}
}

// deliverer puts decoded bands back in row order. Every band not yet
// delivered belongs to a worker and was claimed after every band before it,
// so at most len(ring) consecutive bands from next on are waiting: band i
// waits in ring[i % len(ring)].
type deliverer struct {
	mu         sync.Mutex
	ring       []owned
	next       int
	delivering bool
	first      error
	// bands and rows done, when nothing is delivered in order (no sink)
	bandsDone, rowsDone int

	ctx      context.Context
	cancel   context.CancelFunc
	sink     func(*kernels.Band) error
	progress kernels.Progress
	rows     int
}

func (d *deliverer) fail(err error) {
	d.mu.Lock()
	if d.first == nil {
		d.first = err
	}
	d.mu.Unlock()
	d.cancel()
}

// done counts a band finished where no sink wants them in order, and
// reports the rows done so far (under the lock, so that progress never goes
// back; a Progress must not block).
func (d *deliverer) done(rows int) {
	d.mu.Lock()
	d.bandsDone++
	d.rowsDone += rows
	if d.progress != nil && d.ctx.Err() == nil {
		d.progress(int64(d.rowsDone), int64(d.rows))
	}
	d.mu.Unlock()
}

// offer hands over band i. If it completes the delivered prefix and no other
// worker is delivering, this worker delivers it and every band after it
// already waiting.
func (d *deliverer) offer(i int, o owned) {
	d.mu.Lock()
	d.ring[i%len(d.ring)] = o
	if d.delivering || i != d.next {
		d.mu.Unlock()
		return
	}
	d.delivering = true
	for {
		slot := &d.ring[d.next%len(d.ring)]
		o := *slot
		if o.band == nil {
			break
		}
		*slot = owned{}
		d.mu.Unlock()
		err := d.ctx.Err()
		if err == nil && d.sink != nil {
			err = d.sink(o.band)
		}
		if err == nil && d.progress != nil {
			d.progress(int64(o.band.Hi), int64(d.rows))
		}
		o.home.put(o.band)
		d.mu.Lock()
		if err != nil {
			if d.first == nil {
				d.first = err
			}
			d.cancel()
			break
		}
		d.next++
	}
	d.delivering = false
	d.mu.Unlock()
}
