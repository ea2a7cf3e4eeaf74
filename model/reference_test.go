package model

import (
	"math"

	"github.com/quantscope/quantscope/synth"
)

// The test's own Llama forward: naive loops in float64, written from HF's
// modeling_llama.py, with the linear replaced by a plain W4A-FP8 when asked.

type refLinear func(name string, x [][]float64) [][]float64

func refDense(w map[string]synth.Matrix) refLinear {
	return func(name string, x [][]float64) [][]float64 {
		m := w[name]
		out, in := int(m.Shape[0]), int(m.Shape[1])
		b, hasBias := w[name+".bias"]
		y := make([][]float64, len(x))
		for t := range x {
			y[t] = make([]float64, out)
			for o := 0; o < out; o++ {
				s := 0.0
				for i := 0; i < in; i++ {
					s += x[t][i] * float64(m.Data[o*in+i])
				}
				if hasBias {
					s += float64(b.Data[o])
				}
				y[t][o] = s
			}
		}
		return y
	}
}

func refInvFreq(d int, theta float64, llama3 bool, orig float64) []float64 {
	f := make([]float64, d/2)
	for i := range f {
		f[i] = 1 / math.Pow(theta, float64(2*i)/float64(d))
		if llama3 {
			const factor, lo, hi = 8.0, 1.0, 4.0
			wave := 2 * math.Pi / f[i]
			if wave > orig/lo {
				f[i] /= factor
			} else if wave >= orig/hi {
				s := (orig/wave - lo) / (hi - lo)
				f[i] = (1-s)*f[i]/factor + s*f[i]
			}
		}
	}
	return f
}

func refForward(s synth.LlamaSpec, w map[string]synth.Matrix, lin refLinear, tokens []int) [][]float64 {
	H, hd := s.Hidden, s.Hidden/s.Heads
	T := len(tokens)
	emb := w["model.embed_tokens"]
	h := make([][]float64, T)
	for t, id := range tokens {
		h[t] = make([]float64, H)
		for i := 0; i < H; i++ {
			h[t][i] = float64(emb.Data[id*H+i])
		}
	}
	norm := func(name string, x [][]float64) [][]float64 {
		g := w[name].Data
		y := make([][]float64, len(x))
		for t := range x {
			ms := 0.0
			for _, v := range x[t] {
				ms += v * v
			}
			r := 1 / math.Sqrt(ms/float64(len(x[t]))+1e-5)
			y[t] = make([]float64, len(x[t]))
			for i, v := range x[t] {
				y[t][i] = float64(g[i]) * v * r
			}
		}
		return y
	}
	theta := s.RopeTheta
	if theta == 0 {
		theta = 500000
	}
	inv := refInvFreq(hd, theta, s.Llama3Scaling, 2048)
	rot := func(x [][]float64, heads int) {
		for t := range x {
			for hh := 0; hh < heads; hh++ {
				v := x[t][hh*hd : (hh+1)*hd]
				for i := 0; i < hd/2; i++ {
					c, sn := math.Cos(float64(t)*inv[i]), math.Sin(float64(t)*inv[i])
					a, b := v[i], v[i+hd/2]
					v[i], v[i+hd/2] = a*c-b*sn, b*c+a*sn
				}
			}
		}
	}
	for l := 0; l < s.Layers; l++ {
		p := "model.layers." + itoa(l) + "."
		x := norm(p+"input_layernorm", h)
		q, k, v := lin(p+"self_attn.q_proj", x), lin(p+"self_attn.k_proj", x), lin(p+"self_attn.v_proj", x)
		rot(q, s.Heads)
		rot(k, s.KVHeads)
		a := make([][]float64, T)
		for i := 0; i < T; i++ {
			a[i] = make([]float64, s.Heads*hd)
			for hh := 0; hh < s.Heads; hh++ {
				kh := hh / (s.Heads / s.KVHeads)
				sc := make([]float64, i+1)
				mx := math.Inf(-1)
				for j := 0; j <= i; j++ {
					d := 0.0
					for e := 0; e < hd; e++ {
						d += q[i][hh*hd+e] * k[j][kh*hd+e]
					}
					sc[j] = d / math.Sqrt(float64(hd))
					mx = math.Max(mx, sc[j])
				}
				sum := 0.0
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				for j := range sc {
					for e := 0; e < hd; e++ {
						a[i][hh*hd+e] += sc[j] / sum * v[j][kh*hd+e]
					}
				}
			}
		}
		o := lin(p+"self_attn.o_proj", a)
		for t := range h {
			for i := range h[t] {
				h[t][i] += o[t][i]
			}
		}
		x = norm(p+"post_attention_layernorm", h)
		g, u := lin(p+"mlp.gate_proj", x), lin(p+"mlp.up_proj", x)
		for t := range g {
			for i, gv := range g[t] {
				g[t][i] = gv / (1 + math.Exp(-gv)) * u[t][i]
			}
		}
		d := lin(p+"mlp.down_proj", g)
		for t := range h {
			for i := range h[t] {
				h[t][i] += d[t][i]
			}
		}
	}
	x := norm("model.norm", h)
	head := "lm_head"
	if s.Tied {
		head = "model.embed_tokens"
	}
	return refDense(w)(head, x)
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// e4m3Values are the non-negative finite E4M3 values by code (0x00..0x7e).
var e4m3Values = func() (v [127]float64) {
	for c := range v {
		e, m := c>>3, c&7
		v[c] = (1 + float64(m)/8) * math.Pow(2, float64(e-7))
		if e == 0 {
			v[c] = float64(m) / 8 * math.Pow(2, -6)
		}
	}
	return v
}()

// plainE4M3 is the nearest finite E4M3 value, ties to the even code, by
// trying every code.
func plainE4M3(x float64) float64 {
	best, bestCode, bestErr := 0.0, 0, math.Inf(1)
	for c, v := range e4m3Values {
		err := math.Abs(math.Abs(x) - v)
		if err < bestErr || (err == bestErr && c&1 == 0 && bestCode&1 == 1) {
			best, bestCode, bestErr = v, c, err
		}
	}
	return math.Copysign(best, x)
}

// refW4AFP8 is GPT-QModel's W4A-FP8 arithmetic in float64: per token
// scale amax/448, E4M3 codes of x/scale, Σ_g (Σ_i a·c)·scale_g, times the
// token scale. codes and scales come from the GPTQ tensors, centred.
func refW4AFP8(codes map[string][]int8, scales map[string][]float64, dims map[string][2]int) refLinear {
	return func(name string, x [][]float64) [][]float64 {
		c, sc := codes[name], scales[name]
		out, in := dims[name][0], dims[name][1]
		y := make([][]float64, len(x))
		for t := range x {
			amax := 0.0
			for _, v := range x[t] {
				amax = math.Max(amax, math.Abs(v))
			}
			s := 1.0
			if amax > 0 {
				s = amax / 448
			}
			a := make([]float64, in)
			for i, v := range x[t] {
				a[i] = plainE4M3(math.Max(-448, math.Min(448, v/s)))
			}
			y[t] = make([]float64, out)
			for o := 0; o < out; o++ {
				acc := 0.0
				for g := 0; g < in/128; g++ {
					p := 0.0
					for i := g * 128; i < (g+1)*128; i++ {
						p += a[i] * float64(c[o*in+i])
					}
					acc += p * sc[o*(in/128)+g]
				}
				y[t][o] = acc * s
			}
		}
		return y
	}
}
