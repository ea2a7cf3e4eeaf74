package cpu

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/kernels"
)

// TestLlamaOpsShapes: the LlamaOps and CalibReductions methods refuse
// operands that do not fit, naming the operation.
func TestLlamaOpsShapes(t *testing.T) {
	b, ctx := New(), context.Background()
	m := func(r, c int) kernels.Matrix { return kernels.Matrix{Rows: r, Cols: c, Data: make([]float32, r*c)} }
	for _, c := range []struct {
		err  error
		want string
	}{
		{func() error { _, err := b.RMSNorm(ctx, m(2, 4), make([]float32, 3), 1e-5); return err }(), "rms_norm"},
		{func() error {
			_, err := b.RMSNorm(ctx, kernels.Matrix{Rows: 2, Cols: 4}, make([]float32, 4), 1e-5)
			return err
		}(), "rms_norm"},
		{func() error { _, err := b.RoPE(ctx, m(2, 12), 2, 5, make([]float32, 2)); return err }(), "rope"},
		{func() error { _, err := b.RoPE(ctx, m(2, 16), 2, 8, make([]float32, 3)); return err }(), "rope"},
		{func() error { _, err := b.Attention(ctx, m(2, 24), m(2, 16), m(2, 16), 3, 2, 8); return err }(), "attention"},
		{func() error { _, err := b.Attention(ctx, m(2, 32), m(3, 16), m(2, 16), 4, 2, 8); return err }(), "attention"},
		{func() error { _, err := b.SwiGLU(ctx, m(2, 3), m(3, 2)); return err }(), "swiglu"},
		{func() error { _, err := b.BlockHessians(ctx, m(2, 8)); return err }(), "16-wide"},
		{func() error { _, err := b.AbsHistogram(ctx, []float32{1}, 0, 8); return err }(), "histogram"},
		{func() error { _, _, err := b.ChannelStats(ctx, kernels.Matrix{Rows: 1, Cols: 2}); return err }(), "activation"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("error %v, want one naming %q", c.err, c.want)
		}
	}
}

// TestLlamaOpsSmall checks each op on a case small enough to work out from
// the formula: a constant row's norm, a quarter turn, one key, silu(0).
func TestLlamaOpsSmall(t *testing.T) {
	b, ctx := New(), context.Background()
	// RMSNorm of (3, 3, 3, 3) with eps 0: x/3 = 1, times w
	y, err := b.RMSNorm(ctx, kernels.Matrix{Rows: 1, Cols: 4, Data: []float32{3, 3, 3, 3}}, []float32{1, 2, 3, 4}, 0)
	if err != nil || y.Data[0] != 1 || y.Data[3] != 4 {
		t.Fatalf("rms_norm: %v %v", y.Data, err)
	}
	// RoPE at position 1 with inv = π/2: (x1, x2) → (−x2, x1) up to cos(π/2)'s rounding
	x := kernels.Matrix{Rows: 2, Cols: 2, Data: []float32{1, 2, 1, 2}}
	r, err := b.RoPE(ctx, x, 1, 2, []float32{math.Pi / 2})
	if err != nil || r.Data[0] != 1 || r.Data[1] != 2 || math.Abs(float64(r.Data[2]+2)) > 1e-6 || math.Abs(float64(r.Data[3]-1)) > 1e-6 {
		t.Fatalf("rope: %v %v", r.Data, err)
	}
	if x.Data[2] != 1 {
		t.Fatal("rope changed its input")
	}
	// attention: the first query sees only the first key, so its output is v_0
	q := kernels.Matrix{Rows: 2, Cols: 4, Data: []float32{1, 0, 5, 5, 0, 1, 1, 1}}
	k := kernels.Matrix{Rows: 2, Cols: 2, Data: []float32{1, 1, 2, 2}}
	v := kernels.Matrix{Rows: 2, Cols: 2, Data: []float32{7, -7, 9, 9}}
	a, err := b.Attention(ctx, q, k, v, 2, 1, 2)
	if err != nil || a.Data[0] != 7 || a.Data[1] != -7 || a.Data[2] != 7 || a.Data[3] != -7 {
		t.Fatalf("attention: %v %v", a.Data, err)
	}
	g, err := b.SwiGLU(ctx, kernels.Matrix{Rows: 1, Cols: 2, Data: []float32{0, 20}}, kernels.Matrix{Rows: 1, Cols: 2, Data: []float32{5, 2}})
	if err != nil || g.Data[0] != 0 || math.Abs(float64(g.Data[1]-40)) > 1e-4 {
		t.Fatalf("swiglu: %v %v", g.Data, err)
	}
}
