package cpu

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/kernels"
)

var _ kernels.W4A = (*Backend)(nil)

// plainE4M3 is the nearest finite E4M3 value (|v| ≤ 448), ties to the code
// with an even mantissa, found by trying every code: the test's own encoder.
func plainE4M3(x float32) float32 {
	best, bestCode := float64(0), 0
	bestErr := math.Inf(1)
	for c := 0; c < 0x7f; c++ { // 0x7f is NaN
		e, m := c>>3, c&7
		var v float64
		if e == 0 {
			v = float64(m) / 8 * math.Pow(2, -6)
		} else {
			v = (1 + float64(m)/8) * math.Pow(2, float64(e-7))
		}
		err := math.Abs(math.Abs(float64(x)) - v)
		if err < bestErr || (err == bestErr && c&1 == 0 && bestCode&1 == 1) {
			best, bestCode, bestErr = v, c, err
		}
	}
	if x < 0 {
		return float32(-best)
	}
	return float32(best)
}

// plainW4AFP8 is the quantized arithmetic written from GPT-QModel's formula:
// the group sum in float64 (exact for these values) rounded to float32.
func plainW4AFP8(x []float32, T, K int, codes []int8, scales []float32, bias []float32, N int) []float32 {
	y := make([]float32, T*N)
	G := K / 128
	for t := 0; t < T; t++ {
		var amax float32
		for i := 0; i < K; i++ {
			amax = float32(math.Max(float64(amax), math.Abs(float64(x[t*K+i]))))
		}
		s := float32(1)
		if amax > 0 {
			s = amax / 448
		}
		q := make([]float64, K)
		for i := 0; i < K; i++ {
			v := x[t*K+i] / s
			if v > 448 {
				v = 448
			}
			if v < -448 {
				v = -448
			}
			q[i] = float64(plainE4M3(v))
		}
		for n := 0; n < N; n++ {
			var acc float32
			for g := 0; g < G; g++ {
				var p float64
				for i := g * 128; i < (g+1)*128; i++ {
					p += q[i] * float64(codes[n*K+i])
				}
				acc = acc + float32(float32(p)*scales[n*G+g]) // no fused multiply-add
			}
			out := float32(acc * s)
			if bias != nil {
				out = out + bias[n]
			}
			y[t*N+n] = out
		}
	}
	return y
}

func randomWeight(r *rand.Rand, name string, in, out int, bias bool) *kernels.W4AWeight {
	w := &kernels.W4AWeight{Name: name, In: in, Out: out, Codes: make([]int8, in*out), Scales: make([]float32, out*in/128)}
	for i := range w.Codes {
		w.Codes[i] = int8(r.IntN(16) - 8)
	}
	for i := range w.Scales {
		w.Scales[i] = float32(0.001 + 0.02*r.Float64())
	}
	if bias {
		w.Bias = make([]float32, out)
		for i := range w.Bias {
			w.Bias[i] = float32(r.NormFloat64() * 0.1)
		}
	}
	return w
}

// activations like a decoder's: a normal bulk, rare large outliers, and
// values far below the row's scale (E4M3 subnormals).
func randomActs(r *rand.Rand, T, K int) kernels.Matrix {
	x := kernels.Matrix{Rows: T, Cols: K, Data: make([]float32, T*K)}
	for i := range x.Data {
		v := r.NormFloat64()
		switch r.IntN(64) {
		case 0:
			v *= 40
		case 1:
			v *= 1e-4
		}
		x.Data[i] = float32(v)
	}
	return x
}

func TestW4AFP8MatchesPlainArithmetic(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ T, K, N int }{{1, 128, 32}, {4, 128, 32}, {5, 256, 96}, {7, 384, 64}, {6, 256, 32}} {
		w := randomWeight(r, "m", c.K, c.N, c.T%2 == 1)
		x := randomActs(r, c.T, c.K)
		// an all-zero row takes scale 1
		for i := 0; i < c.K; i++ {
			x.Data[i] = 0
		}
		// rows at the extremes of the group sums: every value at ±amax
		// against codes −8 (|sum| = 2^28 units of 2^-9)
		if c.T >= 4 {
			for o := 0; o < c.K; o++ {
				w.Codes[o] = -8
			}
			for i := 0; i < c.K; i++ {
				x.Data[c.K+i] = 3.5
				x.Data[2*c.K+i] = -1e-30
				x.Data[3*c.K+i] = float32(1-2*(i%2)) * 7
			}
		}
		want := plainW4AFP8(x.Data, c.T, c.K, w.Codes, w.Scales, w.Bias, c.N)
		for _, workers := range []int{1, 3} {
			got, err := (&Backend{Workers: workers}).W4AFP8(context.Background(), x, w)
			if err != nil {
				t.Fatal(err)
			}
			if got.Rows != c.T || got.Cols != c.N {
				t.Fatalf("shape [%d, %d], want [%d, %d]", got.Rows, got.Cols, c.T, c.N)
			}
			for i := range want {
				if math.Float32bits(got.Data[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%+v workers %d: y[%d] = %v, plain arithmetic gives %v", c, workers, i, got.Data[i], want[i])
				}
			}
		}
	}
}

func TestW4AFP8TokenCodes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := randomActs(r, 1, 4096).Data
	x[17] = float32(math.Copysign(0, -1))
	codes := make([]byte, len(x))
	s := W4AFP8Token(codes, x)
	for i, v := range x {
		q := v / s
		q = float32(math.Max(-448, math.Min(448, float64(q))))
		want := plainE4M3(q)
		got := e4m3Units[codes[i]]
		if float32(got)/512 != want {
			t.Fatalf("x[%d]=%v: code value %v, want %v", i, v, float32(got)/512, want)
		}
	}
	if s != float32(maxAbs(x))/448 {
		t.Fatalf("scale %v, want amax/448", s)
	}
}

func maxAbs(x []float32) float64 {
	m := 0.0
	for _, v := range x {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return m
}

func TestW4AFP8Validation(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(5, 6))
	w := randomWeight(r, "model.layers.0.mlp.up_proj", 256, 64, false)
	x := randomActs(r, 2, 256)
	x.Data[300] = float32(math.NaN())
	if _, err := b.W4AFP8(context.Background(), x, w); err == nil || !strings.Contains(err.Error(), "must be finite") || !strings.Contains(err.Error(), "up_proj") {
		t.Fatalf("NaN input: err = %v", err)
	}
	x.Data[300] = float32(math.Inf(1))
	if _, err := b.W4AFP8(context.Background(), x, w); err == nil {
		t.Fatal("inf input accepted")
	}
	y, err := b.W4AFP8(context.Background(), kernels.Matrix{Rows: 0, Cols: 256}, w)
	if err != nil || y.Rows != 0 || y.Cols != 64 || len(y.Data) != 0 {
		t.Fatalf("empty input: %+v, %v", y, err)
	}
	bad := *w
	bad.In, bad.Codes = 200, make([]int8, 200*64)
	if _, err := b.W4AFP8(context.Background(), kernels.Matrix{Rows: 1, Cols: 200, Data: make([]float32, 200)}, &bad); err == nil || !strings.Contains(err.Error(), "multiple of 128") {
		t.Fatalf("in=200: err = %v", err)
	}
	bad = *w
	bad.Out, bad.Codes, bad.Scales = 48, make([]int8, 256*48), make([]float32, 48*2)
	if _, err := b.W4AFP8(context.Background(), randomActs(r, 1, 256), &bad); err == nil || !strings.Contains(err.Error(), "multiple of 32") {
		t.Fatalf("out=48: err = %v", err)
	}
	if _, err := b.W4AFP8(context.Background(), randomActs(r, 1, 128), w); err == nil || !strings.Contains(err.Error(), "128 columns") {
		t.Fatalf("width mismatch: err = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.W4AFP8(ctx, randomActs(r, 4, 256), w); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err = %v", err)
	}
}

// packGPTQ packs [out, in] unsigned codes as GPTQ's qweight [in/8, out]
// (input 8r+k in bits 4k of word r) and zero points as qzeros [groups, out/8].
func packGPTQ(q []uint8, zeros []uint8, in, out int) (qw, qz []byte) {
	qw = make([]byte, in/8*out*4)
	for r := 0; r < in/8; r++ {
		for o := 0; o < out; o++ {
			var word uint32
			for k := 0; k < 8; k++ {
				word |= uint32(q[o*in+8*r+k]) << (4 * k)
			}
			binary.LittleEndian.PutUint32(qw[4*(r*out+o):], word)
		}
	}
	groups := in / 128
	qz = make([]byte, groups*out/8*4)
	for g := 0; g < groups; g++ {
		for j := 0; j < out/8; j++ {
			var word uint32
			for k := 0; k < 8; k++ {
				word |= uint32(zeros[g*out+8*j+k]) << (4 * k)
			}
			binary.LittleEndian.PutUint32(qz[4*(g*out/8+j):], word)
		}
	}
	return qw, qz
}

func TestPrepareW4A(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	in, out := 256, 64
	q := make([]uint8, in*out)
	for i := range q {
		q[i] = uint8(r.IntN(16))
	}
	scales := make([]float32, 2*out)
	for i := range scales {
		scales[i] = float32(i + 1)
	}
	gidx := make([]int32, in)
	for i := range gidx {
		gidx[i] = int32(i / 128)
	}
	z := func(v uint8) []uint8 {
		s := make([]uint8, 2*out)
		for i := range s {
			s[i] = v
		}
		return s
	}
	qw, qz7 := packGPTQ(q, z(7), in, out)
	_, qz8 := packGPTQ(q, z(8), in, out)
	for _, c := range []struct {
		name string
		qz   []byte
		v1   bool
	}{{"v1 stores 7", qz7, true}, {"v2 stores 8", qz8, false}, {"no qzeros", nil, true}} {
		w, err := kernels.PrepareW4A(kernels.GPTQInt4{Name: "m", In: in, Out: out, QWeight: qw, QZeros: c.qz, Scales: scales, GIdx: gidx, V1: c.v1})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for o := 0; o < out; o++ {
			for i := 0; i < in; i++ {
				if int(w.Codes[o*in+i]) != int(q[o*in+i])-8 {
					t.Fatalf("%s: code[%d][%d] = %d, want %d", c.name, o, i, w.Codes[o*in+i], int(q[o*in+i])-8)
				}
			}
			for g := 0; g < 2; g++ {
				if w.Scales[o*2+g] != scales[g*out+o] {
					t.Fatalf("%s: scale[%d][%d] = %v, want %v", c.name, o, g, w.Scales[o*2+g], scales[g*out+o])
				}
			}
		}
	}
	bad := []struct {
		name, rule string
		g          kernels.GPTQInt4
	}{
		{"v1 stores 8", "zero point 9", kernels.GPTQInt4{Name: "m", In: in, Out: out, QWeight: qw, QZeros: qz8, Scales: scales, V1: true}},
		{"v2 stores 7", "zero point 7", kernels.GPTQInt4{Name: "m", In: in, Out: out, QWeight: qw, QZeros: qz7, Scales: scales}},
		{"g_idx", "g_idx[5] is 1", kernels.GPTQInt4{Name: "m", In: in, Out: out, QWeight: qw, Scales: scales, GIdx: func() []int32 { g := append([]int32(nil), gidx...); g[5] = 1; return g }()}},
		{"in", "multiple of 128", kernels.GPTQInt4{Name: "m", In: 200, Out: out, QWeight: qw, Scales: scales}},
		{"out", "multiple of 32", kernels.GPTQInt4{Name: "m", In: in, Out: 40, QWeight: qw, Scales: scales}},
		{"qweight size", "qweight holds", kernels.GPTQInt4{Name: "m", In: in, Out: out, QWeight: qw[:8], Scales: scales}},
	}
	for _, c := range bad {
		_, err := kernels.PrepareW4A(c.g)
		if err == nil || !strings.Contains(err.Error(), c.rule) || !strings.Contains(err.Error(), `module "m"`) {
			t.Errorf("%s: err = %v, want one naming the module and %q", c.name, err, c.rule)
		}
	}
}

func TestNVFP4PlanesExact(t *testing.T) {
	for c := -8; c <= 7; c++ {
		h, l := W4ANVFP4Planes([]int8{int8(c)})
		if h[0] < -2 || h[0] > 2 || l[0] < -2 || l[0] > 1 || int(l[0])+4*int(h[0]) != c {
			t.Fatalf("c=%d: high %d low %d", c, h[0], l[0])
		}
		if want := int(math.Floor(float64(c+2) / 4)); int(h[0]) != want {
			t.Fatalf("c=%d: high %d, want floor((c+2)/4) = %d", c, h[0], want)
		}
	}
	// Activation values as NVFP4 gives them: an E2M1 value times an E4M3
	// block scale per 16 inputs.
	r := rand.New(rand.NewPCG(9, 10))
	e2m1 := []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	T, K, N := 3, 256, 32
	a := kernels.Matrix{Rows: T, Cols: K, Data: make([]float32, T*K)}
	for t0 := 0; t0 < T; t0++ {
		for b := 0; b < K/16; b++ {
			scale := plainE4M3(float32(math.Ldexp(1+r.Float64(), r.IntN(8)-4)))
			for i := 0; i < 16; i++ {
				v := e2m1[r.IntN(8)] * scale
				if r.IntN(2) == 0 {
					v = -v
				}
				a.Data[t0*K+b*16+i] = v
			}
		}
	}
	w := randomWeight(r, "m", K, N, false)
	high, low := W4ANVFP4Planes(w.Codes)
	got := W4APlanesGEMM(a, w, high, low)
	for t0 := 0; t0 < T; t0++ {
		for n := 0; n < N; n++ {
			var acc float32
			for g := 0; g < K/128; g++ {
				var d float32
				for i := g * 128; i < (g+1)*128; i++ {
					d = d + float32(a.Data[t0*K+i]*float32(w.Codes[n*K+i]))
				}
				acc = acc + float32(d*w.Scales[n*(K/128)+g])
			}
			if math.Float32bits(got[t0*N+n]) != math.Float32bits(acc) {
				t.Fatalf("[%d,%d]: two planes %v, direct %v", t0, n, got[t0*N+n], acc)
			}
		}
	}
}

func TestLinearF32(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct{ T, K, N int }{{1, 7, 3}, {5, 600, 70}, {4, 1030, 129}, {0, 8, 4}} {
		x := randomActs(r, c.T, c.K)
		w := randomActs(r, c.N, c.K)
		bias := make([]float32, c.N)
		for i := range bias {
			bias[i] = float32(i)
		}
		for _, workers := range []int{1, 4} {
			y, err := (&Backend{Workers: workers}).LinearF32(context.Background(), x, w, bias)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < c.T; i++ {
				for j := 0; j < c.N; j++ {
					var s float32 // the same order: inputs in order, then the bias
					var s64 float64
					for k := 0; k < c.K; k++ {
						s = s + float32(x.Data[i*c.K+k]*w.Data[j*c.K+k])
						s64 += float64(x.Data[i*c.K+k]) * float64(w.Data[j*c.K+k])
					}
					s += bias[j]
					got := y.Data[i*c.N+j]
					if got != s {
						t.Fatalf("%+v: y[%d][%d] = %v, in-order float32 sum %v", c, i, j, got, s)
					}
					if d := math.Abs(float64(got) - s64 - float64(bias[j])); d > 1e-4*math.Sqrt(float64(c.K))*40 {
						t.Fatalf("%+v: y[%d][%d] = %v, float64 sum %v", c, i, j, got, s64)
					}
				}
			}
		}
	}
	if _, err := New().LinearF32(context.Background(), kernels.Matrix{Rows: 1, Cols: 3, Data: make([]float32, 3)}, kernels.Matrix{Rows: 2, Cols: 4, Data: make([]float32, 8)}, nil); err == nil {
		t.Fatal("width mismatch accepted")
	}
}
