package kernels

import "context"

// CalibReductions are the reductions calib/'s passes run over activations.
type CalibReductions interface {
	// ChannelStats returns, per column of x, max |x| over rows (NaN when a
	// value is NaN) and Σ|x| over rows in float64, in row order.
	ChannelStats(ctx context.Context, x Matrix) (amax []float32, abssum []float64, err error)
	// BlockHessians returns local_hessian's second moments of every
	// 16-wide column block of x: [Cols/16][16][16] float32 values
	// H = Σ_rows x xᵀ (float32, row order) / Rows.
	BlockHessians(ctx context.Context, x Matrix) ([]float32, error)
	// AbsHistogram counts |v| in bins equal bins over [0, max] (max > 0):
	// bin min(floor(f64(|v|)/f64(max)·bins), bins−1); values above max,
	// infinities and NaN in the last.
	AbsHistogram(ctx context.Context, x []float32, max float32, bins int) ([]int64, error)
}
