package cpu

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/quantscope/quantscope/kernels"
)

// quantChunkElems is about how many weights one chunk of a quantization
// holds: large enough that scheduling costs nothing, small enough that a
// cancel lands within a few milliseconds and progress moves smoothly.
const quantChunkElems = 1 << 16

// eachRows runs f over [0, rows) in chunks of whole rows on b.workers()
// goroutines. It checks ctx between chunks, reports rows done to p, and
// returns the first error of f or of ctx.
func (b *Backend) eachRows(ctx context.Context, rows, cols int, p kernels.Progress, f func(lo, hi int) error) error {
	per := max(1, quantChunkElems/max(cols, 1))
	chunks := (rows + per - 1) / per
	workers := min(b.workers(), max(chunks, 1))
	var next, done atomic.Int64
	var once sync.Once
	var firstErr error
	fail := func(err error) { once.Do(func() { firstErr = err }) }
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if failed.Load() {
					return
				}
				if err := ctx.Err(); err != nil {
					fail(err)
					failed.Store(true)
					return
				}
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				lo, hi := c*per, min((c+1)*per, rows)
				if err := f(lo, hi); err != nil {
					fail(err)
					failed.Store(true)
					return
				}
				d := done.Add(int64(hi - lo))
				if p != nil {
					p(d, int64(rows))
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// checkWeight refuses a matrix whose data does not match its shape.
func checkWeight(w kernels.Matrix) error {
	if w.Rows <= 0 || w.Cols <= 0 {
		return fmt.Errorf("rule quantize-shape: the weight is %d×%d; quantization wants a non-empty [out, in] matrix", w.Rows, w.Cols)
	}
	if len(w.Data) != w.Rows*w.Cols {
		return fmt.Errorf("rule quantize-shape: %d×%d matrix holds %d values", w.Rows, w.Cols, len(w.Data))
	}
	return nil
}

// nonFinite is the error for a NaN or infinite weight.
func nonFinite(w kernels.Matrix, i int) error {
	return fmt.Errorf("rule quantize-finite: weight [%d, %d] is %v; quantization wants finite weights",
		i/w.Cols, i%w.Cols, w.Data[i])
}

// rowAmax computes the largest |w| of each row's cbCols-wide column blocks
// (out[r*nb+k], nb = cols/cbCols), refusing non-finite weights.
func (b *Backend) rowAmax(ctx context.Context, w kernels.Matrix, cbCols int, p kernels.Progress) ([]float32, error) {
	nb := w.Cols / cbCols
	out := make([]float32, w.Rows*nb)
	err := b.eachRows(ctx, w.Rows, w.Cols, p, func(lo, hi int) error {
		for r := lo; r < hi; r++ {
			row := w.Data[r*w.Cols : (r+1)*w.Cols]
			if cbCols == 16 {
				if j := rowBlockAmax(out[r*nb:(r+1)*nb], row); j >= 0 {
					return nonFinite(w, r*w.Cols+j)
				}
				continue
			}
			for k := range nb {
				// on the bit patterns: magnitudes order as integers, and
				// anything above the largest finite float is inf or NaN
				var m uint32
				for _, v := range row[k*cbCols : (k+1)*cbCols] {
					if a := math.Float32bits(v) &^ (1 << 31); a > m {
						m = a
					}
				}
				if m > math.Float32bits(math.MaxFloat32) {
					for j, v := range row[k*cbCols : (k+1)*cbCols] {
						if !(abs32(v) <= math.MaxFloat32) {
							return nonFinite(w, r*w.Cols+k*cbCols+j)
						}
					}
				}
				out[r*nb+k] = math.Float32frombits(m)
			}
		}
		return nil
	})
	return out, err
}

// maxFiniteBits is the bit pattern of the largest finite float32; a
// magnitude's pattern above it is inf or NaN.
var maxFiniteBits = math.Float32bits(math.MaxFloat32)

// rowBlockAmax writes the largest |w| of each 16-block of row into dst and
// returns the index of a non-finite value in row, or -1. Magnitudes of
// floats order as their bit patterns, so it runs on integers (or AVX2).
func rowBlockAmax(dst, row []float32) int {
	nb := len(row) / 16
	dst = dst[:nb]
	if useSIMD && nb > 0 {
		blockAmaxAVX2(&dst[0], &row[0], nb)
	} else {
		for k := range nb {
			var m uint32
			for _, v := range row[16*k : 16*k+16] {
				if a := math.Float32bits(v) &^ (1 << 31); a > m {
					m = a
				}
			}
			dst[k] = math.Float32frombits(m)
		}
	}
	for k, v := range dst {
		if math.Float32bits(v) > maxFiniteBits {
			for j, x := range row[16*k : 16*k+16] {
				if !(abs32(x) <= math.MaxFloat32) {
					return 16*k + j
				}
			}
		}
	}
	return -1
}

// globalAmax is the largest |w| of a matrix whose width is a multiple of
// 16, refusing non-finite weights.
func (b *Backend) globalAmax(ctx context.Context, w kernels.Matrix) (float32, error) {
	var mu sync.Mutex
	var amax float32
	err := b.eachRows(ctx, w.Rows, w.Cols, nil, func(lo, hi int) error {
		buf := make([]float32, w.Cols/16)
		var m float32
		for r := lo; r < hi; r++ {
			if j := rowBlockAmax(buf, w.Data[r*w.Cols:(r+1)*w.Cols]); j >= 0 {
				return nonFinite(w, r*w.Cols+j)
			}
			for _, v := range buf {
				if v > m {
					m = v
				}
			}
		}
		mu.Lock()
		amax = max(amax, m)
		mu.Unlock()
		return nil
	})
	return amax, err
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }
