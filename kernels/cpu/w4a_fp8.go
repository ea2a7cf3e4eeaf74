package cpu

import (
	"context"
	"fmt"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/kernels"
)

// The W4A-FP8 linear, GPT-QModel's arithmetic (activation_floatx.py:157-167,
// w4a_triton.py:40-84), with a float32 model dtype:
//
//	token scale  s_t = f32(amax_t / 448), 1 for an all-zero row
//	codes        a_ti = e4m3(clamp(f32(x_ti / s_t), ±448)), nearest-even
//	group sum    P_tog = Σ_{i in g} a_ti · c_oi, rounded once to float32
//	output       y_to = f32(f32(Σ_g f32(P_tog · scale_og)) · s_t) + bias_o
//
// The products of E4M3 values and centred codes are exact, and so is their
// sum over a group when computed as integers: every E4M3 value is a multiple
// of 2^-9 below 2^9, so a_ti·2^9·c_oi is an integer under 2^21 and 128 of them
// sum below 2^28. The group sum is that exact integer rounded once to
// float32. A float32 accumulator in any order gives the same value whenever
// its partial sums stay exact (they do unless a group's sum passes 2^15 while
// it also holds activations below 2^-6 of the row scale); the tensor-core MMA
// GPT-QModel runs leaves its order unspecified. The group products are added
// without a fused multiply-add, in group order.

// e4m3Units is each E4M3 code's value times 2^9: an integer.
var e4m3Units = func() (t [256]int32) {
	for c := range 256 {
		v := numeric.E4M3ToFloat32(byte(c))
		if v != v {
			continue // NaN codes are never produced: the encoder saturates
		}
		t[c] = int32(v * 512)
	}
	return t
}()

// W4AFP8Token quantizes one token row to E4M3 codes with the direct scale
// amax/448 (1 for an all-zero row) and returns the scale.
func W4AFP8Token(codes []byte, x []float32) float32 {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	scale := float32(1)
	if amax != 0 {
		scale = amax / 448
	}
	for i, v := range x {
		q := v / scale
		q = min(max(q, -448), 448)
		codes[i] = numeric.Float32ToE4M3(q)
	}
	return scale
}

// w4aPanel is how many output columns a worker takes at a time (every W4A
// output width is a multiple of 32).
const w4aPanel = 32

// W4AFP8 implements kernels.W4A.
func (b *Backend) W4AFP8(ctx context.Context, x kernels.Matrix, w *kernels.W4AWeight) (kernels.Matrix, error) {
	if err := checkW4A(x, w); err != nil {
		return kernels.Matrix{}, err
	}
	a, err := b.W4AFP8Quantize(ctx, x)
	if err != nil {
		return kernels.Matrix{}, err
	}
	return b.W4AFP8Linear(ctx, a, w)
}

// W4AFP8Quantize implements kernels.W4A: every token row to E4M3 codes and
// its direct scale, in parallel over tokens.
func (b *Backend) W4AFP8Quantize(ctx context.Context, x kernels.Matrix) (*kernels.FP8Tokens, error) {
	if err := checkMatrix("input", x); err != nil {
		return nil, err
	}
	if err := checkFinite("w4a input", x); err != nil {
		return nil, err
	}
	T, K := x.Rows, x.Cols
	a := &kernels.FP8Tokens{Rows: T, Cols: K, Codes: make([]byte, T*K), Scales: make([]float32, T)}
	err := b.parallel(ctx, T, func(t int) {
		a.Scales[t] = W4AFP8Token(a.Codes[t*K:(t+1)*K], x.Data[t*K:(t+1)*K])
	})
	return a, err
}

// W4AFP8Linear implements kernels.W4A: the grouped GEMM of quantized tokens
// and centred INT4 codes, in parallel over panels of 32 outputs, two tokens
// by four outputs at a time.
func (b *Backend) W4AFP8Linear(ctx context.Context, a *kernels.FP8Tokens, w *kernels.W4AWeight) (kernels.Matrix, error) {
	if a == nil || len(a.Codes) != a.Rows*a.Cols || len(a.Scales) != a.Rows {
		return kernels.Matrix{}, fmt.Errorf("w4a: malformed quantized activation")
	}
	if err := checkW4AWeight(w); err != nil {
		return kernels.Matrix{}, err
	}
	if a.Rows > 0 && a.Cols != w.In {
		return kernels.Matrix{}, &kernels.W4AError{Module: w.Name, Rule: "w4a-input", Msg: fmt.Sprintf("input has %d columns, the weight takes %d", a.Cols, w.In)}
	}
	T, K, N := a.Rows, a.Cols, w.Out
	y := kernels.Matrix{Rows: T, Cols: N, Data: make([]float32, T*N)}
	if T == 0 {
		return y, nil
	}
	units := make([]int32, T*K) // E4M3 values in integer units of 2^-9
	for i, c := range a.Codes {
		units[i] = e4m3Units[c]
	}
	// Two tokens share one int64 lane pair: packed = x_{t+1}·2^32 + x_t. A
	// group sum of packed·c is S_{t+1}·2^32 + S_t exactly (|S| < 2^28), so one
	// multiply serves two tokens and the sums come apart without loss.
	pairs := T / 2
	packed := make([]int64, pairs*K)
	for p := range pairs {
		x0, x1 := units[2*p*K:(2*p+1)*K], units[(2*p+1)*K:(2*p+2)*K]
		dst := packed[p*K : (p+1)*K]
		for i := range dst {
			dst[i] = int64(x1[i])<<32 + int64(x0[i])
		}
	}
	groups := K / kernels.W4AGroup
	err := b.parallel(ctx, N/w4aPanel, func(p int) {
		n0, n1 := p*w4aPanel, (p+1)*w4aPanel
		var acc [4][4]float32 // [token][output]
		finish := func(t, n, tokens int) {
			for r := range tokens {
				for j := range 4 {
					y.Data[(t+r)*N+n+j] = float32(acc[r][j] * a.Scales[t+r])
				}
			}
			acc = [4][4]float32{}
		}
		add := func(r int, s [4]int64, n, g int) {
			for j := range 4 {
				acc[r][j] += float32(unitsToF32(int32(s[j])) * w.Scales[(n+j)*groups+g])
			}
		}
		codes := func(n, lo, hi int) ([]int8, []int8, []int8, []int8) {
			return w.Codes[n*K+lo : n*K+hi], w.Codes[(n+1)*K+lo : (n+1)*K+hi], w.Codes[(n+2)*K+lo : (n+2)*K+hi], w.Codes[(n+3)*K+lo : (n+3)*K+hi]
		}
		pp := 0
		for ; pp+2 <= pairs; pp += 2 { // four tokens
			xa, xb := packed[pp*K:(pp+1)*K], packed[(pp+1)*K:(pp+2)*K]
			for n := n0; n < n1; n += 4 {
				for g := range groups {
					lo, hi := g*kernels.W4AGroup, (g+1)*kernels.W4AGroup
					c0, c1, c2, c3 := codes(n, lo, hi)
					sa, sb := packedDot2x4(xa[lo:hi], xb[lo:hi], c0, c1, c2, c3)
					lo0, hi0 := unpackPair(sa)
					lo1, hi1 := unpackPair(sb)
					add(0, lo0, n, g)
					add(1, hi0, n, g)
					add(2, lo1, n, g)
					add(3, hi1, n, g)
				}
				finish(2*pp, n, 4)
			}
		}
		if pp < pairs { // two tokens
			xa := packed[pp*K : (pp+1)*K]
			for n := n0; n < n1; n += 4 {
				for g := range groups {
					lo, hi := g*kernels.W4AGroup, (g+1)*kernels.W4AGroup
					c0, c1, c2, c3 := codes(n, lo, hi)
					l, h := unpackPair(packedDot4(xa[lo:hi], c0, c1, c2, c3))
					add(0, l, n, g)
					add(1, h, n, g)
				}
				finish(2*pp, n, 2)
			}
		}
		if T%2 == 1 { // the last token
			t := T - 1
			xt := units[t*K : (t+1)*K]
			for n := n0; n < n1; n += 4 {
				for g := range groups {
					lo, hi := g*kernels.W4AGroup, (g+1)*kernels.W4AGroup
					c0, c1, c2, c3 := codes(n, lo, hi)
					s := groupDot4(xt[lo:hi], c0, c1, c2, c3)
					add(0, [4]int64{int64(s[0]), int64(s[1]), int64(s[2]), int64(s[3])}, n, g)
				}
				finish(t, n, 1)
			}
		}
		if w.Bias != nil {
			for t := range T {
				for n := n0; n < n1; n++ {
					y.Data[t*N+n] += w.Bias[n]
				}
			}
		}
	})
	return y, err
}

// unitsToF32 is an exact group sum in units of 2^-9, rounded once to float32.
func unitsToF32(s int32) float32 { return float32(s) * (1.0 / 512) }

func groupDot4(x []int32, c0, c1, c2, c3 []int8) (s [4]int32) {
	c0, c1, c2, c3 = c0[:len(x)], c1[:len(x)], c2[:len(x)], c3[:len(x)]
	var s0, s1, s2, s3 int32
	for i, v := range x {
		s0 += v * int32(c0[i])
		s1 += v * int32(c1[i])
		s2 += v * int32(c2[i])
		s3 += v * int32(c3[i])
	}
	return [4]int32{s0, s1, s2, s3}
}

// unpackPair splits packed group sums S_hi·2^32 + S_lo (|S| < 2^31).
func unpackPair(s [4]int64) (lo, hi [4]int64) {
	for j, v := range s {
		l := int64(int32(v))
		lo[j], hi[j] = l, (v-l)>>32
	}
	return lo, hi
}

func packedDot4(x []int64, c0, c1, c2, c3 []int8) [4]int64 {
	c0, c1, c2, c3 = c0[:len(x)], c1[:len(x)], c2[:len(x)], c3[:len(x)]
	var s0, s1, s2, s3 int64
	for i, v := range x {
		s0 += v * int64(c0[i])
		s1 += v * int64(c1[i])
		s2 += v * int64(c2[i])
		s3 += v * int64(c3[i])
	}
	return [4]int64{s0, s1, s2, s3}
}

func packedDot2x4(x, z []int64, c0, c1, c2, c3 []int8) (s, r [4]int64) {
	z = z[:len(x)]
	c0, c1, c2, c3 = c0[:len(x)], c1[:len(x)], c2[:len(x)], c3[:len(x)]
	var s0, s1, s2, s3, r0, r1, r2, r3 int64
	for i, v := range x {
		u := z[i]
		w0, w1, w2, w3 := int64(c0[i]), int64(c1[i]), int64(c2[i]), int64(c3[i])
		s0 += v * w0
		s1 += v * w1
		s2 += v * w2
		s3 += v * w3
		r0 += u * w0
		r1 += u * w1
		r2 += u * w2
		r3 += u * w3
	}
	return [4]int64{s0, s1, s2, s3}, [4]int64{r0, r1, r2, r3}
}

// checkW4AWeight is the reference's validation of the weight
// (w4a_floatx.py:22-30): in % 128, out % 32, codes and scales of that shape.
func checkW4AWeight(w *kernels.W4AWeight) error {
	if w == nil {
		return fmt.Errorf("w4a: no weight")
	}
	fail := func(rule, f string, a ...any) error {
		return &kernels.W4AError{Module: w.Name, Rule: rule, Msg: fmt.Sprintf(f, a...)}
	}
	if w.In <= 0 || w.In%kernels.W4AGroup != 0 {
		return fail("w4a-shape", "input width %d is not a positive multiple of %d", w.In, kernels.W4AGroup)
	}
	if w.Out <= 0 || w.Out%32 != 0 {
		return fail("w4a-shape", "output width %d is not a multiple of 32", w.Out)
	}
	if len(w.Codes) != w.In*w.Out || len(w.Scales) != w.Out*(w.In/kernels.W4AGroup) || (w.Bias != nil && len(w.Bias) != w.Out) {
		return fail("w4a-weight", "codes, scales or bias do not match [%d, %d]", w.Out, w.In)
	}
	return nil
}

// checkW4A adds the input's checks: a finite matrix of the weight's width.
func checkW4A(x kernels.Matrix, w *kernels.W4AWeight) error {
	if err := checkW4AWeight(w); err != nil {
		return err
	}
	if err := checkMatrix("input", x); err != nil {
		return err
	}
	if x.Rows > 0 && x.Cols != w.In {
		return &kernels.W4AError{Module: w.Name, Rule: "w4a-input", Msg: fmt.Sprintf("input has %d columns, the weight takes %d", x.Cols, w.In)}
	}
	return checkFinite("w4a input of "+w.Name, x)
}
