package ptx

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
)

func randMatrix(r *rand.Rand, rows, cols int, spread int) kernels.Matrix {
	m := kernels.Matrix{Rows: rows, Cols: cols, Data: make([]float32, rows*cols)}
	for i := range m.Data {
		m.Data[i] = float32(r.NormFloat64() * math.Ldexp(1, r.IntN(spread+1)-spread/2))
	}
	return m
}

func f32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// ulps is how many float32 steps apart a and b are (same sign assumed
// near; a sign change counts through zero).
func ulps(a, b float32) int64 {
	k := func(x float32) int64 {
		u := int64(math.Float32bits(x))
		if u&(1<<31) != 0 {
			return -(u &^ (1 << 31))
		}
		return u
	}
	d := k(a) - k(b)
	if d < 0 {
		d = -d
	}
	return d
}

// closeF32 asserts got is want within maxULP float32 steps, each element,
// and reports how many are equal bit for bit.
func closeF32(t *testing.T, what string, got []byte, want []float32, maxULP int64) {
	t.Helper()
	g := f32s(got)
	if len(g) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(g), len(want))
	}
	same := 0
	for i := range want {
		if d := ulps(g[i], want[i]); d > maxULP || g[i] != g[i] {
			t.Fatalf("%s: value %d is %g, want %g (%d ulp apart, bound %d)", what, i, g[i], want[i], d, maxULP)
		} else if d == 0 {
			same++
		}
	}
	t.Logf("%s: %d of %d values equal bit for bit, the rest within %d ulp", what, same, len(want), maxULP)
}

// closeAbs asserts |got − want| ≤ bound[i] for each element (a bound for
// sums whose terms may cancel, where ulps mean little).
func closeAbs(t *testing.T, what string, got []byte, want, bound []float32) {
	t.Helper()
	g := f32s(got)
	if len(g) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(g), len(want))
	}
	same := 0
	for i := range want {
		d := math.Abs(float64(g[i]) - float64(want[i]))
		if !(d <= float64(bound[i])) {
			t.Fatalf("%s: value %d is %g, want %g (|Δ| %g over the bound %g)", what, i, g[i], want[i], d, bound[i])
		}
		if math.Float32bits(g[i]) == math.Float32bits(want[i]) {
			same++
		}
	}
	t.Logf("%s: %d of %d values equal bit for bit, the rest within the bound", what, same, len(want))
}

// ropeBound is 2^-22·(|x1| + |x2|): cos and sin each a float32 ulp
// (2^-23 relative) off, the products and the sum rounded alike.
func ropeBound(x []float32, heads, d int) []float32 {
	b := make([]float32, len(x))
	half := d / 2
	for o := 0; o < len(x); o += d {
		for i := range half {
			v := float32(0x1p-22 * (math.Abs(float64(x[o+i])) + math.Abs(float64(x[o+i+half]))))
			b[o+i], b[o+i+half] = v, v
		}
	}
	return b
}

// attnBound is 2^-19·max|v|: each probability a few float32 ulps off
// (exp, their sum, the division), the weighted sum otherwise in the same order.
func attnBound(v []float32, n int) []float32 {
	var m float64
	for _, x := range v {
		m = max(m, math.Abs(float64(x)))
	}
	b := make([]float32, n)
	for i := range b {
		b[i] = float32(0x1p-19 * m)
	}
	return b
}

func TestHostKernelsRMSNorm(t *testing.T) {
	bin := hostFwdKernels(t)
	r := rand.New(rand.NewPCG(21, 1))
	for _, s := range [][2]int{{1, 16}, {7, 576}, {3, 2048}} {
		x := randMatrix(r, s[0], s[1], 16)
		w := randMatrix(r, 1, s[1], 4).Data
		eps := float32(1e-5)
		want := cpu.RMSNorm(x, w, eps)
		got := runHost(t, bin, append(f32b(x.Data), f32b(w)...), "rms_norm", fmt.Sprint(s[0]), fmt.Sprint(s[1]), fmt.Sprintf("%.9g", eps))
		// one thread a row on the host: the CPU's order, bit for bit
		sameBits(t, fmt.Sprintf("rms_norm %v", s), got, want.Data)
	}
}

func TestHostKernelsRoPE(t *testing.T) {
	bin := hostFwdKernels(t)
	r := rand.New(rand.NewPCG(22, 1))
	// llama3-scaled frequencies come from model.Config.InvFreq; any values do here
	for _, s := range [][3]int{{1, 1, 2}, {37, 4, 64}, {300, 2, 128}} {
		T, heads, d := s[0], s[1], s[2]
		x := randMatrix(r, T, heads*d, 8)
		inv := make([]float32, d/2)
		for i := range inv {
			inv[i] = float32(1 / math.Pow(500000, float64(2*i)/float64(d)))
			if i%3 == 0 {
				inv[i] /= 8
			}
		}
		want := kernels.Matrix{Rows: x.Rows, Cols: x.Cols, Data: append([]float32(nil), x.Data...)}
		cpu.NewRope(inv, T).Apply(want, heads, d)
		got := runHost(t, bin, append(f32b(x.Data), f32b(inv)...), "rope", fmt.Sprint(T), fmt.Sprint(heads), fmt.Sprint(d))
		// cos and sin from glibc here, Go's math on the CPU: each within a
		// double ulp, so equal once rounded to float32 except near a boundary
		closeAbs(t, fmt.Sprintf("rope %v", s), got, want.Data, ropeBound(x.Data, heads, d))
	}
}

func TestHostKernelsAttention(t *testing.T) {
	bin := hostFwdKernels(t)
	r := rand.New(rand.NewPCG(23, 1))
	for _, s := range [][4]int{{1, 1, 1, 8}, {19, 4, 2, 64}, {70, 6, 2, 32}} {
		T, heads, kv, d := s[0], s[1], s[2], s[3]
		q, k, v := randMatrix(r, T, heads*d, 4), randMatrix(r, T, kv*d, 4), randMatrix(r, T, kv*d, 4)
		want := cpu.Attention(q, k, v, heads, kv, d)
		scale := float32(1 / math.Sqrt(float64(d)))
		in := append(append(f32b(q.Data), f32b(k.Data)...), f32b(v.Data)...)
		got := runHost(t, bin, in, "attention", fmt.Sprint(T), fmt.Sprint(heads), fmt.Sprint(kv), fmt.Sprint(d), fmt.Sprintf("%.9g", scale))
		closeAbs(t, fmt.Sprintf("attention %v", s), got, want.Data, attnBound(v.Data, len(want.Data)))
	}
}

func TestHostKernelsSwiGLU(t *testing.T) {
	bin := hostFwdKernels(t)
	r := rand.New(rand.NewPCG(24, 1))
	g, u := randMatrix(r, 1, 5000, 12), randMatrix(r, 1, 5000, 4)
	g.Data[0], g.Data[1], g.Data[2] = 0, 100, -100 // exp under- and overflowing
	want := append([]float32(nil), g.Data...)
	cpu.SwiGLU(want, u.Data)
	got := runHost(t, bin, append(f32b(g.Data), f32b(u.Data)...), "swiglu", fmt.Sprint(len(want)))
	// exp a float32 ulp off: 1 + e, the quotient and the product each round once more
	closeF32(t, "swiglu", got, want, 4)
}

func TestHostKernelsCalib(t *testing.T) {
	bin := hostFwdKernels(t)
	r := rand.New(rand.NewPCG(25, 1))
	ctx := context.Background()
	be := cpu.New()
	rows, cols := 53, 96
	x := randMatrix(r, rows, cols, 30)
	x.Data[5] = float32(math.Copysign(0, -1))
	// channel stats: a plain reference from the formula
	got := runHost(t, bin, f32b(x.Data), "channel_stats", fmt.Sprint(rows), fmt.Sprint(cols))
	wantMax, wantSum := make([]float32, cols), make([]float64, cols)
	for c := range cols {
		for rr := range rows {
			a := float32(math.Abs(float64(x.Data[rr*cols+c])))
			wantMax[c] = max(wantMax[c], a)
			wantSum[c] += float64(a)
		}
	}
	sameBits(t, "channel amax", got[:4*cols], wantMax)
	for c := range cols {
		if s := math.Float64frombits(binary.LittleEndian.Uint64(got[4*cols+8*c:])); s != wantSum[c] {
			t.Fatalf("channel %d: Σ|x| %g, want %g", c, s, wantSum[c])
		}
	}
	cm, cs, err := be.ChannelStats(ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	for c := range cols {
		if cm[c] != wantMax[c] || cs[c] != wantSum[c] {
			t.Fatalf("cpu ChannelStats column %d: %g %g, want %g %g", c, cm[c], cs[c], wantMax[c], wantSum[c])
		}
	}
	// block Hessians against the local_hessian recipe's own accumulation
	wantH, err := be.BlockHessians(ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	got = runHost(t, bin, f32b(x.Data), "block_hessians", fmt.Sprint(rows), fmt.Sprint(cols))
	sameBits(t, "block_hessians", got, wantH)
	// histogram: with max below the largest value, so the last bin collects
	mx := wantMax[3]
	wantC, err := be.AbsHistogram(ctx, x.Data, mx, 2048)
	if err != nil {
		t.Fatal(err)
	}
	plain := make([]int64, 2048)
	for _, v := range x.Data {
		a := math.Abs(float64(v))
		b := 2047
		if a <= float64(mx) {
			b = min(int(a/float64(mx)*2048), 2047)
		}
		plain[b]++
	}
	got = runHost(t, bin, f32b(x.Data), "abs_hist", fmt.Sprint(len(x.Data)), fmt.Sprintf("%.9g", mx), "2048")
	for b := range plain {
		if c := int64(binary.LittleEndian.Uint64(got[8*b:])); c != plain[b] || wantC[b] != plain[b] {
			t.Fatalf("bin %d: kernel %d, cpu %d, plain %d", b, c, wantC[b], plain[b])
		}
	}
}
