package cpu

import (
	"context"
	"errors"
	"sync"

	"github.com/quantscope/quantscope/kernels"
)

// Dequantize decodes src in bands of rows on every worker and hands them to
// sink in row order.
//
// Working set: at most 2·Workers bands exist at once (a fixed pool, reused),
// each of about opt.ChunkBytes of float32 output (at least one row), and each
// worker's decoder keeps scratch for one band's stored bytes and scale rows
// (no more than the band's output for any stored format). So the bound is
// about 3·Workers·ChunkBytes (with the default 512 KiB chunks and 16 workers,
// under 25 MiB), whatever the module's size; nothing is allocated per band
// once the pool has grown.
func (b *Backend) Dequantize(ctx context.Context, src kernels.RowSource, opt kernels.DequantOptions, sink func(*kernels.Band) error) error {
	return b.stream(ctx, src, opt.ChunkBytes, opt.WantMeta, opt.Progress, opt.Each, sink)
}

func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// stream is the pipeline under Dequantize and Stats: a dispatcher hands
// bands from the pool to the workers in row order; each worker decodes its
// band and runs work(worker, band) on it; the calling goroutine puts the
// finished bands back in order, calls sink and reports progress, then
// returns the band to the pool. ctx is checked before each band is handed
// out and before each is decoded, so a cancel stops every worker within the
// band it is decoding.
func (b *Backend) stream(ctx context.Context, src kernels.RowSource, chunk int, meta bool, progress kernels.Progress,
	work func(worker int, band *kernels.Band) error, sink func(*kernels.Band) error) error {
	rows, cols := src.Shape()
	per := kernels.BandRows(cols, chunk)
	nb := (rows + per - 1) / per
	if nb == 0 {
		return ctx.Err()
	}
	workers := min(b.workers(), nb)
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	pool := 2 * workers
	free := make(chan *kernels.Band, pool)
	for range pool {
		free <- &kernels.Band{Cols: cols}
	}
	type job struct {
		i    int
		band *kernels.Band
	}
	type done struct {
		job
		err error
	}
	jobs := make(chan job)
	results := make(chan done, pool) // never blocks: at most pool bands are out
	go func() {
		defer close(jobs)
		for i := range nb {
			var band *kernels.Band
			select {
			case band = <-free:
			case <-ctx.Done():
				return
			}
			band.Lo, band.Hi = i*per, min((i+1)*per, rows)
			select {
			case jobs <- job{i, band}:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			dec := src.NewDecoder()
			for j := range jobs {
				err := ctx.Err()
				if err == nil {
					band := j.band
					band.Values = grow(band.Values, (band.Hi-band.Lo)*cols)
					var m *kernels.BandMeta
					if meta {
						band.Meta.Reset()
						m = &band.Meta
					}
					if err = dec.Decode(band.Values, band.Lo, band.Hi, m); err == nil && work != nil {
						err = work(w, band)
					}
				}
				results <- done{j, err}
			}
		})
	}
	go func() { wg.Wait(); close(results) }()

	pending := make(map[int]*kernels.Band, pool)
	next := 0
	var first error
	for r := range results {
		if first != nil {
			continue // draining after an error
		}
		if r.err != nil {
			first = r.err
			cancel()
			continue
		}
		pending[r.i] = r.band
		for band, ok := pending[next]; ok; band, ok = pending[next] {
			delete(pending, next)
			if err := ctx.Err(); err != nil { // nothing reaches the sink after a cancel
				first = err
				break
			}
			if sink != nil {
				if err := sink(band); err != nil {
					first = err
					cancel()
					break
				}
			}
			next++
			if progress != nil {
				progress(int64(band.Hi), int64(rows))
			}
			free <- band
		}
	}
	switch {
	case first != nil && parent.Err() != nil:
		return parent.Err()
	case first != nil:
		return first
	case next < nb:
		if err := parent.Err(); err != nil {
			return err
		}
		return errors.New("cpu: stream ended early")
	}
	return nil
}
