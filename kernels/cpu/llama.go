package cpu

import (
	"context"
	"fmt"
	"math"
	"runtime"

	"github.com/quantscope/quantscope/kernels"
)

// The Llama decoder layer's other operations in HF's float32 order, the
// reference the model/ forward runs and the CUDA kernels (kernels/cuda/ptx/
// llama.cu) are checked against. exp, cos, sin and the square root are
// computed in float64 and rounded to float32.

// RMSNorm is HF's LlamaRMSNorm in float32: x·rsqrt(mean(x²)+eps), times the
// weight. The mean of squares is summed in float64 and rounded to float32
// (torch's float32 reduction order is not specified); rsqrt is 1/sqrt in
// float64, rounded.
func RMSNorm(x kernels.Matrix, w []float32, eps float32) kernels.Matrix {
	y := kernels.Matrix{Rows: x.Rows, Cols: x.Cols, Data: make([]float32, len(x.Data))}
	for t := range x.Rows {
		row := x.Data[t*x.Cols : (t+1)*x.Cols]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		variance := float32(ss / float64(len(row)))
		r := float32(1 / math.Sqrt(float64(variance+eps)))
		out := y.Data[t*x.Cols : (t+1)*x.Cols]
		for i, v := range row {
			out[i] = float32(w[i] * float32(v*r))
		}
	}
	return y
}

// Rope holds cos and sin [T, d/2] of HF's rotary embedding: freqs =
// f32(position · inv_freq), cos/sin of it (in float64, rounded); the
// attention scaling of default and llama3 RoPE is 1.
type Rope struct {
	half     int
	cos, sin []float32
}

// NewRope tabulates positions 0..T−1 for the inverse frequencies inv.
func NewRope(inv []float32, T int) *Rope {
	r := &Rope{half: len(inv), cos: make([]float32, T*len(inv)), sin: make([]float32, T*len(inv))}
	for t := range T {
		for i, f := range inv {
			a := float64(float32(float32(t) * f))
			r.cos[t*r.half+i] = float32(math.Cos(a))
			r.sin[t*r.half+i] = float32(math.Sin(a))
		}
	}
	return r
}

// Apply rotates each head of x [T, heads·d] in place: HF's
// x·cos + rotate_half(x)·sin with rotate_half(x) = (−x2, x1).
func (r *Rope) Apply(x kernels.Matrix, heads, d int) {
	for t := range x.Rows {
		cs, sn := r.cos[t*r.half:(t+1)*r.half], r.sin[t*r.half:(t+1)*r.half]
		for h := range heads {
			v := x.Data[t*x.Cols+h*d : t*x.Cols+(h+1)*d]
			for i := range r.half {
				x1, x2 := v[i], v[i+r.half]
				v[i] = float32(x1*cs[i]) - float32(x2*sn[i])
				v[i+r.half] = float32(x2*cs[i]) + float32(x1*sn[i])
			}
		}
	}
}

// Attention is causal grouped-query attention as HF's eager path computes
// it: scores q·k (float32, in order) times d^-0.5, positions after the
// query masked, softmax in float32 (exp in float64, rounded), then the
// weighted sum of v in key order. Query head h reads KV head h/(heads/kv).
// Heads run in parallel on every core.
func Attention(q, k, v kernels.Matrix, heads, kvHeads, d int) kernels.Matrix {
	out, _ := attention(context.Background(), runtime.GOMAXPROCS(0), q, k, v, heads, kvHeads, d)
	return out
}

// attention is Attention on workers goroutines, stopping between heads when
// ctx is cancelled.
func attention(ctx context.Context, workers int, q, k, v kernels.Matrix, heads, kvHeads, d int) (kernels.Matrix, error) {
	T := q.Rows
	out := kernels.Matrix{Rows: T, Cols: heads * d, Data: make([]float32, T*heads*d)}
	scale := float32(1 / math.Sqrt(float64(d)))
	group := heads / kvHeads
	err := ParallelFor(ctx, workers, heads, func(h int) {
		kh := h / group
		s := make([]float32, T)
		for i := range T {
			qi := q.Data[i*q.Cols+h*d : i*q.Cols+(h+1)*d]
			mx := float32(math.Inf(-1))
			for j := 0; j <= i; j++ {
				kj := k.Data[j*k.Cols+kh*d : j*k.Cols+(kh+1)*d]
				var dot float32
				for e, qv := range qi {
					dot += float32(qv * kj[e])
				}
				s[j] = float32(dot * scale)
				mx = max(mx, s[j])
			}
			var sum float32
			for j := 0; j <= i; j++ {
				s[j] = float32(math.Exp(float64(s[j] - mx)))
				sum += s[j]
			}
			o := out.Data[i*out.Cols+h*d : i*out.Cols+(h+1)*d]
			for j := 0; j <= i; j++ {
				p := s[j] / sum
				vj := v.Data[j*v.Cols+kh*d : j*v.Cols+(kh+1)*d]
				for e := range o {
					o[e] += float32(p * vj[e])
				}
			}
		}
	})
	return out, err
}

// SiLU is x·sigmoid(x) in float32 (exp in float64, rounded).
func SiLU(x float32) float32 {
	return float32(x / float32(1+float32(math.Exp(float64(-x)))))
}

// SwiGLU sets g to silu(g)·u elementwise, in place.
func SwiGLU(g, u []float32) {
	for i, gv := range g {
		g[i] = float32(SiLU(gv) * u[i])
	}
}

// CheckLlamaShapes refuses operands whose sizes do not match (the
// LlamaOps methods' errors, shared with the CUDA client).
func CheckLlamaShapes(op string, ms ...kernels.Matrix) error {
	for i, m := range ms {
		if m.Rows < 0 || m.Cols < 0 || len(m.Data) != m.Rows*m.Cols {
			return fmt.Errorf("%s: operand %d holds %d values for [%d, %d]", op, i, len(m.Data), m.Rows, m.Cols)
		}
	}
	return nil
}

// RMSNorm implements kernels.LlamaOps.
func (b *Backend) RMSNorm(ctx context.Context, x kernels.Matrix, w []float32, eps float32) (kernels.Matrix, error) {
	if err := CheckLlamaShapes("rms_norm", x); err != nil {
		return kernels.Matrix{}, err
	}
	if len(w) != x.Cols {
		return kernels.Matrix{}, fmt.Errorf("rms_norm: weight holds %d values for %d columns", len(w), x.Cols)
	}
	return RMSNorm(x, w, eps), ctx.Err()
}

// RoPE implements kernels.LlamaOps.
func (b *Backend) RoPE(ctx context.Context, x kernels.Matrix, heads, d int, inv []float32) (kernels.Matrix, error) {
	if err := CheckRoPE(x, heads, d, inv); err != nil {
		return kernels.Matrix{}, err
	}
	y := kernels.Matrix{Rows: x.Rows, Cols: x.Cols, Data: append([]float32(nil), x.Data...)}
	NewRope(inv, x.Rows).Apply(y, heads, d)
	return y, ctx.Err()
}

// CheckRoPE refuses a RoPE whose heads do not tile x.
func CheckRoPE(x kernels.Matrix, heads, d int, inv []float32) error {
	if err := CheckLlamaShapes("rope", x); err != nil {
		return err
	}
	if heads <= 0 || d <= 0 || d%2 != 0 || x.Cols != heads*d || len(inv) != d/2 {
		return fmt.Errorf("rope: %d heads of dimension %d (even) with %d frequencies do not tile [%d, %d]", heads, d, len(inv), x.Rows, x.Cols)
	}
	return nil
}

// Attention implements kernels.LlamaOps.
func (b *Backend) Attention(ctx context.Context, q, k, v kernels.Matrix, heads, kvHeads, d int) (kernels.Matrix, error) {
	if err := CheckAttention(q, k, v, heads, kvHeads, d); err != nil {
		return kernels.Matrix{}, err
	}
	return attention(ctx, b.workers(), q, k, v, heads, kvHeads, d)
}

// CheckAttention refuses q, k, v that are not [T, heads·d], [T, kvHeads·d].
func CheckAttention(q, k, v kernels.Matrix, heads, kvHeads, d int) error {
	if err := CheckLlamaShapes("attention", q, k, v); err != nil {
		return err
	}
	if heads <= 0 || kvHeads <= 0 || d <= 0 || heads%kvHeads != 0 {
		return fmt.Errorf("attention: %d heads are not a positive multiple of %d KV heads (dimension %d)", heads, kvHeads, d)
	}
	if q.Cols != heads*d || k.Cols != kvHeads*d || v.Cols != kvHeads*d || k.Rows != q.Rows || v.Rows != q.Rows {
		return fmt.Errorf("attention: q [%d, %d], k [%d, %d], v [%d, %d] do not match %d heads, %d KV heads of dimension %d", q.Rows, q.Cols, k.Rows, k.Cols, v.Rows, v.Cols, heads, kvHeads, d)
	}
	return nil
}

// SwiGLU implements kernels.LlamaOps.
func (b *Backend) SwiGLU(ctx context.Context, g, u kernels.Matrix) (kernels.Matrix, error) {
	if err := CheckLlamaShapes("swiglu", g, u); err != nil {
		return kernels.Matrix{}, err
	}
	if g.Rows != u.Rows || g.Cols != u.Cols {
		return kernels.Matrix{}, fmt.Errorf("swiglu: gate [%d, %d] and up [%d, %d] differ", g.Rows, g.Cols, u.Rows, u.Cols)
	}
	y := kernels.Matrix{Rows: g.Rows, Cols: g.Cols, Data: append([]float32(nil), g.Data...)}
	SwiGLU(y.Data, u.Data)
	return y, ctx.Err()
}

var _ kernels.LlamaOps = (*Backend)(nil)
