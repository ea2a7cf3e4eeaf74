package model

import (
	"context"
	"math"
	"runtime"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
)

// rope holds cos and sin [T, d/2] of HF's rotary embedding: freqs =
// f32(position · inv_freq), cos/sin of it (in float64, rounded); the
// attention scaling of default and llama3 RoPE is 1.
type rope struct {
	half     int
	cos, sin []float32
}

func newRope(c *Config, T int) *rope {
	inv := c.InvFreq()
	r := &rope{half: len(inv), cos: make([]float32, T*len(inv)), sin: make([]float32, T*len(inv))}
	for t := range T {
		for i, f := range inv {
			a := float64(float32(float32(t) * f))
			r.cos[t*r.half+i] = float32(math.Cos(a))
			r.sin[t*r.half+i] = float32(math.Sin(a))
		}
	}
	return r
}

// apply rotates each head of x [T, heads·d] in place: HF's
// x·cos + rotate_half(x)·sin with rotate_half(x) = (−x2, x1).
func (r *rope) apply(x kernels.Matrix, heads, d int) {
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

// attention is causal grouped-query attention as HF's eager path computes
// it: scores q·k (float32, in order) times d^-0.5, positions after the
// query masked, softmax in float32 (exp in float64, rounded), then the
// weighted sum of v in key order. Query head h reads KV head h/(heads/kv).
// Heads run on every core; a cancel stops it between heads.
func attention(ctx context.Context, q, k, v kernels.Matrix, c *Config) (kernels.Matrix, error) {
	T, d := q.Rows, c.HeadDim
	out := kernels.Matrix{Rows: T, Cols: c.Heads * d, Data: make([]float32, T*c.Heads*d)}
	scale := float32(1 / math.Sqrt(float64(d)))
	group := c.Heads / c.KVHeads
	err := cpu.ParallelFor(ctx, runtime.GOMAXPROCS(0), c.Heads, func(h int) {
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
