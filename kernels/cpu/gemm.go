package cpu

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/quantscope/quantscope/kernels"
)

// The float32 linear y = x·wᵀ + b, blocked for the cache: output columns are
// split into panels of gemmPanel that the workers take in turn; within a
// panel the input dimension is walked in slices of gemmKBlock so the panel's
// weight slice stays in L2 while every token row passes over it; a 2×4 tile
// of outputs is kept in registers. Each output is one float32 sum in input
// order (the partial sum is carried across K slices), so the result does not
// depend on the blocking or the number of workers.
const (
	gemmPanel  = 64
	gemmKBlock = 512
)

// LinearF32 implements kernels.W4A.
func (b *Backend) LinearF32(ctx context.Context, x, w kernels.Matrix, bias []float32) (kernels.Matrix, error) {
	if err := checkMatrix("input", x); err != nil {
		return kernels.Matrix{}, err
	}
	if err := checkMatrix("weight", w); err != nil {
		return kernels.Matrix{}, err
	}
	if x.Cols != w.Cols {
		return kernels.Matrix{}, fmt.Errorf("linear: input has %d columns, weight [%d, %d] wants %d", x.Cols, w.Rows, w.Cols, w.Cols)
	}
	if bias != nil && len(bias) != w.Rows {
		return kernels.Matrix{}, fmt.Errorf("linear: bias holds %d values for %d outputs", len(bias), w.Rows)
	}
	y := kernels.Matrix{Rows: x.Rows, Cols: w.Rows, Data: make([]float32, x.Rows*w.Rows)}
	if x.Rows == 0 || w.Rows == 0 {
		return y, nil
	}
	panels := (w.Rows + gemmPanel - 1) / gemmPanel
	err := b.parallel(ctx, panels, func(p int) {
		n0, n1 := p*gemmPanel, min((p+1)*gemmPanel, w.Rows)
		for k0 := 0; k0 < x.Cols; k0 += gemmKBlock {
			gemmBlock(y, x, w, n0, n1, k0, min(k0+gemmKBlock, x.Cols))
		}
		if bias != nil { // after the sum, as torch's addmm adds it
			for t := range y.Rows {
				row := y.Data[t*y.Cols : (t+1)*y.Cols]
				for n := n0; n < n1; n++ {
					row[n] += bias[n]
				}
			}
		}
	})
	return y, err
}

// gemmBlock adds x[:, k0:k1]·w[n0:n1, k0:k1]ᵀ to y[:, n0:n1].
func gemmBlock(y, x, w kernels.Matrix, n0, n1, k0, k1 int) {
	K, N := x.Cols, y.Cols
	t := 0
	for ; t+2 <= x.Rows; t += 2 {
		a0, a1 := x.Data[t*K+k0:t*K+k1], x.Data[(t+1)*K+k0:(t+1)*K+k1]
		n := n0
		for ; n+4 <= n1; n += 4 {
			w0 := w.Data[n*K+k0 : n*K+k1]
			w1 := w.Data[(n+1)*K+k0 : (n+1)*K+k1]
			w2 := w.Data[(n+2)*K+k0 : (n+2)*K+k1]
			w3 := w.Data[(n+3)*K+k0 : (n+3)*K+k1]
			w1, w2, w3 = w1[:len(w0)], w2[:len(w0)], w3[:len(w0)]
			a0, a1 := a0[:len(w0)], a1[:len(w0)]
			y0, y1 := y.Data[t*N+n:t*N+n+4], y.Data[(t+1)*N+n:(t+1)*N+n+4]
			s00, s01, s02, s03 := y0[0], y0[1], y0[2], y0[3]
			s10, s11, s12, s13 := y1[0], y1[1], y1[2], y1[3]
			for k, v0 := range a0 {
				v1 := a1[k]
				c0, c1, c2, c3 := w0[k], w1[k], w2[k], w3[k]
				s00 += float32(v0 * c0)
				s01 += float32(v0 * c1)
				s02 += float32(v0 * c2)
				s03 += float32(v0 * c3)
				s10 += float32(v1 * c0)
				s11 += float32(v1 * c1)
				s12 += float32(v1 * c2)
				s13 += float32(v1 * c3)
			}
			y0[0], y0[1], y0[2], y0[3] = s00, s01, s02, s03
			y1[0], y1[1], y1[2], y1[3] = s10, s11, s12, s13
		}
		for ; n < n1; n++ {
			y.Data[t*N+n] = dot(y.Data[t*N+n], a0, w.Data[n*K+k0:n*K+k1])
			y.Data[(t+1)*N+n] = dot(y.Data[(t+1)*N+n], a1, w.Data[n*K+k0:n*K+k1])
		}
	}
	for ; t < x.Rows; t++ {
		a := x.Data[t*K+k0 : t*K+k1]
		for n := n0; n < n1; n++ {
			y.Data[t*N+n] = dot(y.Data[t*N+n], a, w.Data[n*K+k0:n*K+k1])
		}
	}
}

// dot continues the float32 sum s with a·b, in order.
func dot(s float32, a, b []float32) float32 {
	b = b[:len(a)]
	for k, v := range a {
		s += float32(v * b[k]) // the conversion forbids a fused multiply-add
	}
	return s
}

func checkMatrix(what string, m kernels.Matrix) error {
	if m.Rows < 0 || m.Cols < 0 || len(m.Data) != m.Rows*m.Cols {
		return fmt.Errorf("linear: %s matrix [%d, %d] holds %d values", what, m.Rows, m.Cols, len(m.Data))
	}
	return nil
}

// checkFinite reports the first NaN or infinity of an input.
func checkFinite(what string, m kernels.Matrix) error {
	for i, v := range m.Data {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%s: row %d column %d is %v; the input must be finite", what, i/max(m.Cols, 1), i%max(m.Cols, 1), v)
		}
	}
	return nil
}

// parallel runs fn(0..n-1) on the backend's workers, checking ctx between
// items; it returns ctx's error when cancelled.
func (b *Backend) parallel(ctx context.Context, n int, fn func(i int)) error {
	return ParallelFor(ctx, b.workers(), n, fn)
}

// ParallelFor runs fn(0..n-1) on up to workers goroutines, each taking the
// next item when done with one (so uneven items balance), checking ctx
// between items; it returns ctx's error when cancelled.
func ParallelFor(ctx context.Context, workers, n int, fn func(i int)) error {
	workers = min(workers, n)
	if workers <= 1 {
		for i := range n {
			if err := ctx.Err(); err != nil {
				return err
			}
			fn(i)
		}
		return ctx.Err()
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
	return ctx.Err()
}
