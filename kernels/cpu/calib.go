package cpu

import (
	"context"
	"fmt"
	"math"

	"github.com/quantscope/quantscope/kernels"
)

// The calibration reductions (kernels.CalibReductions), the reference of
// kernels/cuda/ptx/calib.cu.

// ChannelStats implements kernels.CalibReductions: one column at a time,
// rows in order.
func (b *Backend) ChannelStats(ctx context.Context, x kernels.Matrix) ([]float32, []float64, error) {
	if err := checkMatrix("activation", x); err != nil {
		return nil, nil, err
	}
	amax, sum := make([]float32, x.Cols), make([]float64, x.Cols)
	err := b.eachRows(ctx, x.Cols, x.Rows, nil, func(lo, hi int) error {
		for c := lo; c < hi; c++ {
			var m float32
			var s float64
			for r := range x.Rows {
				a := abs32(x.Data[r*x.Cols+c])
				m = max(m, a)
				s += float64(a)
			}
			amax[c], sum[c] = m, s
		}
		return nil
	})
	return amax, sum, err
}

// BlockHessians implements kernels.CalibReductions with the local_hessian
// recipe's own accumulation (blockHessians).
func (b *Backend) BlockHessians(ctx context.Context, x kernels.Matrix) ([]float32, error) {
	if x.Cols%16 != 0 {
		return nil, fmt.Errorf("rule local-hessian-data: %d activation columns are not whole 16-wide blocks", x.Cols)
	}
	hs, err := b.blockHessians(ctx, x, x.Cols)
	if err != nil {
		return nil, err
	}
	out := make([]float32, 0, 256*len(hs))
	for i := range hs {
		for r := range 16 {
			out = append(out, hs[i][r][:]...)
		}
	}
	return out, nil
}

// AbsHistogram implements kernels.CalibReductions.
func (b *Backend) AbsHistogram(ctx context.Context, x []float32, mx float32, bins int) ([]int64, error) {
	if bins <= 0 || !(mx > 0 && mx <= math.MaxFloat32) {
		return nil, fmt.Errorf("histogram: %d bins over [0, %g]: want bins > 0 and a positive finite max", bins, mx)
	}
	h := make([]int64, bins)
	for _, v := range x {
		a := abs32(v)
		k := bins - 1
		if a <= mx {
			k = min(int(float64(a)/float64(mx)*float64(bins)), bins-1)
		}
		h[k]++
	}
	return h, ctx.Err()
}

var _ kernels.CalibReductions = (*Backend)(nil)
