package calib

import (
	"context"
	"encoding/binary"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/model"
	"github.com/quantscope/quantscope/synth"
)

func TestWeightMax(t *testing.T) {
	m, w := loadLlama(t, "f32")
	got, err := WeightMaxes(context.Background(), m.Checkpoint(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for name := range w {
		if !strings.HasSuffix(name, "layernorm") && name != "model.norm" && !strings.HasSuffix(name, ".bias") {
			want++
		}
	}
	if len(got) != want {
		t.Fatalf("%d modules, want %d", len(got), want)
	}
	for _, r := range got {
		var amax float32
		for _, v := range w[r.Module].Data {
			amax = float32(math.Max(float64(amax), math.Abs(float64(v))))
		}
		if r.Amax != amax || r.NVFP4 != amax/2688 || r.FP8 != amax/448 {
			t.Fatalf("%s: %+v, plain amax %v", r.Module, r, amax)
		}
	}
}

// producerValues is every producer's |values| over the data, from plain
// dense forwards.
func producerValues(t *testing.T, m *model.Model, d *Data) map[string][]float64 {
	vals := map[string][]float64{}
	for _, s := range d.Seqs {
		_, err := m.Forward(context.Background(), s, model.Options{Observe: func(p string, x kernels.Matrix) error {
			for _, v := range x.Data {
				vals[p] = append(vals[p], math.Abs(float64(v)))
			}
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	return vals
}

func TestPercentile(t *testing.T) {
	m, _ := loadLlama(t, "f32")
	d := dataFile(t, 9, 14)
	vals := producerValues(t, m, d)
	for _, p := range []float64{99.99, 90, 100} {
		got, err := Percentiles(context.Background(), m, d, Options{}, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 9 {
			t.Fatalf("%d producers", len(got))
		}
		for _, r := range got {
			v := append([]float64(nil), vals[r.Producer]...)
			sort.Float64s(v)
			mx := v[len(v)-1]
			// the exact quantile (rank ceil(p/100·N)) lies in the bin whose
			// upper edge is reported
			exact := v[max(0, int(math.Ceil(p/100*float64(len(v))))-1)]
			width := mx / 2048
			if float32(mx) != r.Max || float64(r.Amax) < exact-1e-6*mx || float64(r.Amax) > exact+width*(1+1e-6) || r.Tokens != 23 {
				t.Fatalf("p %v %s: %+v; exact quantile %v, bin width %v", p, r.Producer, r, exact, width)
			}
			if g, _ := kernels.NVFP4GlobalScale(r.Amax, "least_squares"); g != r.GlobalScale {
				t.Fatalf("%s: scale %v", r.Producer, r.GlobalScale)
			}
		}
	}
	if _, err := Percentiles(context.Background(), m, d, Options{}, 0); err == nil {
		t.Error("percentile 0 accepted")
	}
}

func TestHeadroom(t *testing.T) {
	m, _ := loadLlama(t, "f32")
	d := dataFile(t, 9, 14)
	blockMax := map[string][]float64{}
	for _, s := range d.Seqs {
		m.Forward(context.Background(), s, model.Options{Observe: func(p string, x kernels.Matrix) error {
			for b := 0; b < len(x.Data); b += 16 {
				blockMax[p] = append(blockMax[p], float64(absMax(x.Data[b:b+16])))
			}
			return nil
		}})
	}
	bin := func(v float64) int { return min(max(int(math.Floor((math.Log2(v)+40)/(80.0/512))), 0), 511) }
	centre := func(b int) float64 { return math.Exp2(-40 + (float64(b)+0.5)*80/512) }
	for _, rho := range []float64{HeadroomRho, 1} {
		got, err := Headrooms(context.Background(), m, d, Options{}, rho)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range got {
			v := append([]float64(nil), blockMax[r.Producer]...)
			sort.Float64s(v)
			upper := centre(bin(v[int(math.Ceil(0.9999*float64(len(v))))-1]))
			var kept []float64
			for _, x := range v {
				if centre(bin(x)) >= upper/1e6 {
					kept = append(kept, x)
				}
			}
			anchor := centre(bin(kept[int(math.Ceil(0.01*float64(len(kept))))-1]))
			amax := rho * anchor
			warn := amax <= upper
			if warn {
				amax = upper
			}
			if r.Upper != upper || r.Anchor != anchor || r.Amax != amax || (r.Warning != "") != warn || r.Blocks != int64(len(v)) || r.GlobalScale != float32(amax)/2688 {
				t.Fatalf("rho %v %s: %+v; plain upper %v anchor %v amax %v warning %v", rho, r.Producer, r, upper, anchor, amax, warn)
			}
			if rho == 1 && !warn {
				t.Fatalf("rho 1 gave headroom over upper: %+v", r)
			}
		}
	}
	for _, bad := range []float64{0, 28672, -1} {
		if _, err := Headrooms(context.Background(), m, d, Options{}, bad); err == nil {
			t.Errorf("rho %v accepted", bad)
		}
	}
}

func TestAWQLite(t *testing.T) {
	m, _ := loadLlama(t, "f32")
	d := dataFile(t, 9, 14)
	got, err := AWQLite(context.Background(), m, d, Options{}, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 14 {
		t.Fatalf("%d projections, want 14", len(got))
	}
	improved := 0
	for _, r := range got {
		best := 0
		for i, e := range r.MSE {
			if e < r.MSE[best] {
				best = i
			}
		}
		if len(r.MSE) != 11 || r.Alpha != AWQAlphas[best] || r.MSEAfter != r.MSE[best] || r.Tokens != 23 || !(r.MSEBefore > 0) {
			t.Fatalf("%+v", r)
		}
		if r.MSEAfter < r.MSEBefore {
			improved++
		}
	}
	if improved == 0 {
		t.Error("awq_lite improved no projection")
	}
	// the scale formula, plainly
	xbar, wbar := []float64{1, 4, 0.01}, []float64{0.5, 0.25, 1}
	s := awqScales(xbar, wbar, 0.5)
	raw := []float64{math.Sqrt(1) / math.Sqrt(0.5), math.Sqrt(4) / math.Sqrt(0.25), math.Sqrt(0.01) / 1}
	n := math.Sqrt(4 * 0.1)
	for i := range s {
		if math.Abs(s[i]-raw[i]/n) > 1e-12 {
			t.Fatalf("s = %v, want %v", s, raw)
		}
	}
	if s := awqScales([]float64{1e9, 1}, []float64{1, 1}, 1); s[0] != 1e4/math.Sqrt(1e4) {
		t.Fatalf("clamp: %v", s)
	}
	// ModelOpt's get_scale adds float32 tiny to the denominator: a channel
	// whose input and weight means are both 0 is 0 / tiny, clamped to 1e-4
	// (not 0/0).
	if s := awqScales([]float64{0, 1}, []float64{0, 1}, 0.5); s[0] != 1e-4/math.Sqrt(1e-4) || s[1] != 1/math.Sqrt(1e-4) {
		t.Fatalf("zero channel: %v", s)
	}
	// Each sequence counts alike, as ModelOpt averages per forward: a
	// 1-token sequence with |x| = 10 and a 3-token one with |x| = 1 give
	// x̄ = (10 + 1)/2, not 13/4; the output error likewise.
	x := kernels.Matrix{Rows: 4, Cols: 16, Data: make([]float32, 64)}
	for i := range x.Data {
		x.Data[i] = 1
		if i < 16 {
			x.Data[i] = -10
		}
	}
	w := kernels.Matrix{Rows: 1, Cols: 16, Data: make([]float32, 16)}
	for i := range w.Data {
		w.Data[i] = 1
	}
	if xbar, _ := awqStats(x, w, []int{1, 3}); xbar[0] != 5.5 {
		t.Fatalf("x̄ %v, want 5.5", xbar[0])
	}
	zero := kernels.Matrix{Rows: 1, Cols: 16, Data: make([]float32, 16)}
	// outputs 16·(−10) and 16·1: errors 25600 and 256 a token
	if e := outputMSE(x, w, zero, []int{1, 3}); e != (25600+256)/2.0 {
		t.Fatalf("output MSE %v, want the mean of the sequences' %v", e, (25600+256)/2.0)
	}
}

func TestLocalHessian(t *testing.T) {
	m, _ := loadLlama(t, "f32")
	d := dataFile(t, 9, 14)
	ctx := context.Background()
	got, err := LocalHessians(ctx, m, d, Options{}, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	var mx, lh float64
	for _, r := range got {
		mx += r.MSEMax
		lh += r.MSELocalHessian
	}
	t.Logf("output MSE summed over 14 projections: max %.4g, local_hessian %.4g", mx, lh)
	if len(got) != 14 || !(lh < mx) {
		t.Fatalf("%d projections; local_hessian %v not below max %v", len(got), lh, mx)
	}
	// the dump is the projection's inputs, as a plain forward sees them
	x, err := Inputs(ctx, m, d, Options{}, "model.layers.1.mlp.down_proj")
	if tok, in := x.Rows, x.Cols; err != nil || tok != 23 || in != 768 {
		t.Fatalf("%d %d %v", tok, in, err)
	}
	var want []float32
	for _, s := range d.Seqs {
		m.Forward(ctx, s, model.Options{LinearInput: func(n string, x kernels.Matrix) {
			if n == "model.layers.1.mlp.down_proj" {
				want = append(want, x.Data...)
			}
		}})
	}
	b := F32Bytes(x) // the --data file's bytes
	if len(b) != 4*len(want) {
		t.Fatalf("%d bytes for %d values", len(b), len(want))
	}
	for i, v := range want {
		if math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) != v {
			t.Fatalf("value %d differs", i)
		}
	}
	if _, err := Inputs(ctx, m, d, Options{}, "model.layers.1.mlp"); err == nil {
		t.Error("a non-projection accepted")
	}
}

// An embedding row holding a NaN or an infinity makes every pass refuse
// the producer it reaches, naming it and the rule: a percentile's bin index
// of NaN panicked, headroom binned it low and reported finite scales, and
// awq_lite ended on an unnamed JSON error. act_max runs on GPTQ weights.
func TestNonFiniteActivations(t *testing.T) {
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
		m, _ := loadLlamaWith(t, "f32", poison(bad))
		d := dataFile(t, 9, 14)
		ctx := context.Background()
		for name, run := range map[string]func() error{
			"percentile": func() error { _, err := Percentiles(ctx, m, d, Options{}, 99.99); return err },
			"headroom":   func() error { _, err := Headrooms(ctx, m, d, Options{}, HeadroomRho); return err },
			"awq_lite":   func() error { _, err := AWQLite(ctx, m, d, Options{}, cpu.New()); return err },
		} {
			err := run()
			if err == nil || !strings.Contains(err.Error(), "rule finite-activations") || !strings.Contains(err.Error(), "producer ") {
				t.Errorf("%v in the embedding, %s: %v", bad, name, err)
			}
		}
		g, _ := loadLlamaWith(t, "gptq", poison(bad))
		if _, err := ActMax(ctx, g, d, Options{}, ActMaxHooks{}); err == nil || !strings.Contains(err.Error(), "rule finite-activations") {
			t.Errorf("%v in the embedding, act_max: %v", bad, err)
		}
	}
}

// poison puts bad in the first channel of every token's embedding.
func poison(bad float32) func(map[string]synth.Matrix) {
	return func(w map[string]synth.Matrix) {
		e := w["model.embed_tokens"]
		cols := int(e.Shape[1])
		for r := range int(e.Shape[0]) {
			e.Data[r*cols] = bad
		}
	}
}
