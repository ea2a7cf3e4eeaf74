package cuda

import (
	"context"
	"fmt"
	"github.com/quantscope/quantscope/companion/ops"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/synth"
)

// memFile is a safetensors file in memory (a scheme.TensorReader).
type memFile struct {
	h    *safetensors.Header
	data []byte
}

func newMem(t testing.TB, ts []safetensors.WriteTensor) *memFile {
	t.Helper()
	b, err := safetensors.Encode(ts, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := safetensors.Parse("mem.safetensors", b)
	if err != nil {
		t.Fatal(err)
	}
	return &memFile{h: h, data: b}
}

func (m *memFile) infos() []scheme.TensorInfo {
	var out []scheme.TensorInfo
	for _, t := range m.h.Tensors {
		out = append(out, scheme.TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape, NBytes: t.NBytes()})
	}
	return out
}

func (m *memFile) ReadTensor(name string, off, n int64) ([]byte, error) {
	t, ok := m.h.Lookup(name)
	if !ok || off < 0 || uint64(off+n) > t.NBytes() {
		return nil, fmt.Errorf("tensor %q: read [%d, %d) outside", name, off, off+n)
	}
	s := m.h.DataStart() + int64(t.Begin) + off
	return m.data[s : s+n], nil
}

func synthWeights(seed uint64, rows, cols int) synth.Matrix {
	r := rand.New(rand.NewPCG(seed, 1))
	d := make([]float32, rows*cols)
	for i := range d {
		d[i] = float32(r.NormFloat64()) * float32(math.Ldexp(1, -(i/cols)%9-3))
	}
	return synth.Matrix{Shape: []uint64{uint64(rows), uint64(cols)}, Data: d}
}

type packedModule struct {
	name string
	m    *scheme.Module
	r    scheme.TensorReader
	kind string // what Packed must report
}

// packedModules are real modules of every layout with a packed form, as
// synth writes them (GPTQ's g_idx shuffled: desc_act).
func packedModules(t testing.TB) []packedModule {
	w := synthWeights(1, 48, 256)
	ct := func(bits int) *scheme.Scheme {
		return &scheme.Scheme{Method: "compressed-tensors", Groups: []scheme.ConfigGroup{{Targets: []string{"Linear"}, Weights: &scheme.QuantArgs{NumBits: bits, Type: "int", GroupSize: 64}}}}
	}
	ctOld := func(bits int, sym bool) *scheme.Scheme {
		s := ct(bits)
		s.Version = "0.17.0"
		s.Groups[0].Weights.Symmetric = sym
		return s
	}
	gptq := synth.GPTQ("m", w, 4, 32)
	for i := range gptq {
		if gptq[i].Name == "m.g_idx" { // desc_act: columns in any group order
			r := rand.New(rand.NewPCG(9, 9))
			d := gptq[i].Data
			r.Shuffle(len(d)/4, func(a, b int) {
				for k := range 4 {
					d[4*a+k], d[4*b+k] = d[4*b+k], d[4*a+k]
				}
			})
		}
	}
	cases := []struct {
		name string
		ts   []safetensors.WriteTensor
		s    *scheme.Scheme
		kind string
	}{
		{"ct-int4", synth.CTPack("m", w, 4, 64, true, packing.CTBitstream), ct(4), "int"},
		{"ct-int3-bitstream-asym", synth.CTPack("m", w, 3, 64, false, packing.CTBitstream), ct(3), "int"},
		{"ct-int5-per-word-asym", synth.CTPack("m", w, 5, 64, false, packing.CTPerWord), ctOld(5, false), "int"},
		{"ct-int8", synth.CTPack("m", w, 8, 64, true, packing.CTBitstream), ct(8), "int"},
		{"gptq-v1-desc-act", gptq, &scheme.Scheme{Method: "gptq", Bits: 4, GroupSize: 32, CheckpointFormat: "gptq"}, "int"},
		{"gptq-v2-3bit", synth.GPTQ("m", w, 3, 64), &scheme.Scheme{Method: "gptq", Bits: 3, GroupSize: 64, CheckpointFormat: "gptq_v2"}, "int"},
		{"gptq-8bit", synth.GPTQ("m", w, 8, 128), &scheme.Scheme{Method: "gptq", Bits: 8, GroupSize: 128, CheckpointFormat: "gptq"}, "int"},
		{"awq", synth.AWQ("m", w, 64), &scheme.Scheme{Method: "awq", Bits: 4, GroupSize: 64}, "int"},
		{"nvfp4-modelopt", synth.NVFP4ModelOpt("m", w, 2, safetensors.F32), &scheme.Scheme{Method: "modelopt", Family: scheme.FamilyNVFP4}, "nvfp4"},
		{"nvfp4-compressed-tensors", synth.NVFP4CT("m", w, 4), &scheme.Scheme{Method: "compressed-tensors", Format: "nvfp4-pack-quantized",
			Groups: []scheme.ConfigGroup{{Targets: []string{"Linear"}, Weights: &scheme.QuantArgs{NumBits: 4, Type: "float", GroupSize: 16}}}}, "nvfp4"},
		{"mxfp4", synth.MXFP4("m", w), &scheme.Scheme{Method: "mxfp4", Family: scheme.FamilyMXFP4}, "mxfp4"},
		{"fp8-tensor", synth.FP8Tensor("m", w, 1), &scheme.Scheme{Method: "fp8", Family: scheme.FamilyFP8}, "fp8"},
		{"fp8-channel", synth.FP8Channel("m", w), &scheme.Scheme{Method: "fp8", Family: scheme.FamilyFP8}, "fp8"},
		{"fp8-block", synth.FP8Block("m", w, 32), &scheme.Scheme{Method: "fp8", Family: scheme.FamilyFP8}, "fp8"},
		{"fp8-block-inverse", synth.FP8Block("m", w, 32), &scheme.Scheme{Method: "fp8", Family: scheme.FamilyFP8, InverseFP8Scales: true}, "fp8"},
	}
	var out []packedModule
	for _, c := range cases {
		mem := newMem(t, c.ts)
		ms := scheme.Group(mem.infos(), c.s, nil)
		if len(ms) != 1 {
			t.Fatalf("%s: %d modules", c.name, len(ms))
		}
		out = append(out, packedModule{c.name, ms[0], mem, c.kind})
	}
	return out
}

// The packed form of every layout decodes (on the CPU, by the client's
// fallback) to formats/scheme's values bit for bit, and through the
// host-compiled kernels on the fake worker too.
func TestPackedIntMatchesScheme(t *testing.T) {
	hostIntKernels(t)
	b, l := openFake(t, "cpu")
	ctx := context.Background()
	for _, c := range packedModules(t) {
		s, err := scheme.OpenRows(c.m, c.r)
		if err != nil {
			t.Fatal(c.name, err)
		}
		p, err := s.Packed()
		if err != nil || p == nil || p.Kind != c.kind {
			t.Fatalf("%s (%s %s): Packed() = %+v, %v; want kind %s", c.name, c.m.Format, c.m.Layout, p, err, c.kind)
		}
		if p.Kind != "int" {
			continue
		}
		if (c.m.Layout == scheme.LayoutGPTQ || c.m.Layout == scheme.LayoutGPTQv2) && p.Zeros == nil {
			t.Fatalf("%s: no zero points read", c.name)
		}
		rows, _ := c.m.Matrix2D()
		want, err := scheme.Dequantize(c.m, c.r, 0, int(rows))
		if err != nil {
			t.Fatal(c.name, err)
		}
		layouts := map[string]IntLayout{"ct-bitstream": CTBitstream, "ct-per-word": CTPerWord, "gptq": GPTQ, "awq": AWQ}
		w := &IntWeight{Layout: layouts[p.IntLayout], Bits: p.Bits, Rows: p.Rows, Cols: p.Cols, Packed: p.Data, Scales: p.Scales, Zeros: p.Zeros, GIdx: p.GIdx}
		got, err := DequantIntCPU(w)
		if err != nil {
			t.Fatal(c.name, err)
		}
		sameF32(t, c.name+" (CPU)", got, want)
		if got, err = b.DequantInt(ctx, w); err != nil {
			t.Fatal(c.name, err)
		}
		sameF32(t, c.name+" (host kernels)", got, want)
	}
	if l.n() != 0 {
		t.Fatalf("fell back to the CPU: %s", l.all())
	}
}

// sameStats compares Stats exactly, but for mean and std (relative 1e-9).
func sameStats(t *testing.T, what string, got, want *kernels.Stats) {
	t.Helper()
	close := func(a, b, scale float64) bool { return math.Abs(a-b) <= 1e-9*scale || (a != a && b != b) }
	eq := func(a, b float64) bool { return a == b || (a != a && b != b) }
	switch {
	case got.Rows != want.Rows || got.Cols != want.Cols || got.Count != want.Count || got.NaN != want.NaN || got.Inf != want.Inf:
		t.Fatalf("%s: shape/counts %d×%d n %d NaN %d inf %d, CPU %d×%d n %d NaN %d inf %d", what, got.Rows, got.Cols, got.Count, got.NaN, got.Inf, want.Rows, want.Cols, want.Count, want.NaN, want.Inf)
	case !eq(got.Min, want.Min) || !eq(got.Max, want.Max):
		t.Fatalf("%s: min %g max %g, CPU %g %g", what, got.Min, got.Max, want.Min, want.Max)
	case !close(got.Mean, want.Mean, want.Std+math.Abs(want.Mean)) || !close(got.Std, want.Std, want.Std):
		t.Fatalf("%s: mean %.17g std %.17g, CPU %.17g %.17g", what, got.Mean, got.Std, want.Mean, want.Std)
	case fmt.Sprint(got.Histogram) != fmt.Sprint(want.Histogram):
		t.Fatalf("%s: histogram\n%v\nCPU\n%v", what, got.Histogram, want.Histogram)
	case fmt.Sprint(got.ScaleHistogram) != fmt.Sprint(want.ScaleHistogram) || got.Scales != want.Scales || got.ScaleZero != want.ScaleZero:
		t.Fatalf("%s: scales %d (zero %d) %v, CPU %d (zero %d) %v", what, got.Scales, got.ScaleZero, got.ScaleHistogram, want.Scales, want.ScaleZero, want.ScaleHistogram)
	case got.Codes != want.Codes || got.AtMax != want.AtMax || !eq(got.AtMaxFraction, want.AtMaxFraction):
		t.Fatalf("%s: codes %d at max %d, CPU %d %d", what, got.Codes, got.AtMax, want.Codes, want.AtMax)
	case got.ScaleE4M3 != want.ScaleE4M3 || got.ScaleAtMax != want.ScaleAtMax || got.ScaleSubnormal != want.ScaleSubnormal ||
		!eq(got.ScaleAtMaxFraction, want.ScaleAtMaxFraction) || !eq(got.ScaleSubnormalFraction, want.ScaleSubnormalFraction):
		t.Fatalf("%s: E4M3 scales %d at max %d subnormal %d, CPU %d %d %d", what, got.ScaleE4M3, got.ScaleAtMax, got.ScaleSubnormal, want.ScaleE4M3, want.ScaleAtMax, want.ScaleSubnormal)
	}
}

// Stats of every packed layout through the kernels (host-compiled, on the
// fake worker) equal the CPU backend's: counts, extremes, both histograms
// and the code and scale shares exactly, mean and std to 1e-9.
func TestStatsPackedMatchesCPU(t *testing.T) {
	hostIntKernels(t)
	b, l := openFake(t, "cpu")
	ctx := context.Background()
	for _, c := range packedModules(t) {
		src, err := ops.ModuleSource(c.m, c.r) // the adapter the companion's jobs use
		if err != nil {
			t.Fatal(c.name, err)
		}
		want, err := cpu.New().Stats(ctx, src, kernels.StatsOptions{Bins: 50})
		if err != nil {
			t.Fatal(c.name, err)
		}
		var done int64
		got, err := b.Stats(ctx, src, kernels.StatsOptions{Bins: 50, Progress: func(d, _ int64) { done = d }})
		if err != nil {
			t.Fatal(c.name, err)
		}
		sameStats(t, c.name, got, want)
		if done != int64(got.Rows) || got.Histogram.Counts == nil || len(got.Histogram.Counts) < 10 {
			t.Fatalf("%s: progress %d of %d rows, histogram %v", c.name, done, got.Rows, got.Histogram)
		}
	}
	if l.n() != 0 {
		t.Fatalf("fell back to the CPU: %s", l.all())
	}
}

// valuesSource is a RowSource over decoded values that also hands over a
// packed form (no band information: Stats' moments and histogram only).
type valuesSource struct {
	rows, cols int
	v          []float32
	p          *kernels.Packed
}

func (s valuesSource) Shape() (int, int)                { return s.rows, s.cols }
func (s valuesSource) NewDecoder() kernels.RowDecoder   { return s }
func (s valuesSource) Packed() (*kernels.Packed, error) { return s.p, nil }
func (s valuesSource) Decode(dst []float32, lo, hi int, _ *kernels.BandMeta) error {
	copy(dst, s.v[lo*s.cols:hi*s.cols])
	return nil
}

// NaN and ±inf (from scales and from E5M2 codes), −0, odd bit widths and
// per-word packing: the kernels' counts, extremes and histogram equal the
// CPU backend's over the same values.
func TestStatsWildValues(t *testing.T) {
	hostIntKernels(t)
	b, l := openFake(t, "cpu")
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 5))
	var srcs []valuesSource
	for _, bits := range []int{1, 3, 7} {
		rows, cols := 33, 200
		codes := make([]int8, rows*cols)
		for i := range codes {
			codes[i] = int8(r.IntN(1<<bits) - 1<<(bits-1))
		}
		packed, err := packing.PackCT(codes, rows, cols, bits, packing.CTPerWord)
		if err != nil {
			t.Fatal(err)
		}
		groups := 4
		w := &IntWeight{Layout: CTPerWord, Bits: bits, Rows: rows, Cols: cols, Packed: packed, Scales: make([]float32, rows*groups)}
		for i := range w.Scales {
			w.Scales[i] = float32(math.Ldexp(r.Float64()+0.5, r.IntN(80)-60))
		}
		w.Scales[3], w.Scales[7], w.Scales[11] = float32(math.NaN()), float32(math.Inf(-1)), float32(math.Copysign(0, -1))
		v, err := DequantIntCPU(w)
		if err != nil {
			t.Fatal(err)
		}
		p := &kernels.Packed{Kind: "int", IntLayout: "ct-per-word", Rows: rows, Cols: cols, Bits: bits, Data: packed, Scales: w.Scales}
		srcs = append(srcs, valuesSource{rows, cols, v, p})
	}
	for _, e5 := range []bool{false, true} {
		rows, cols := 40, 96
		codes := make([]byte, rows*cols)
		for i := range codes {
			codes[i] = byte(r.IntN(256))
		}
		g := FP8Grid{Rows: rows, Cols: cols, R: 16, C: 32, E5M2: e5, Inverse: !e5}
		scales := make([]float32, 3*3)
		for i := range scales {
			scales[i] = float32(math.Ldexp(r.Float64()+0.5, r.IntN(20)-10))
		}
		scales[4] = 0 // inverse: ±inf and NaN
		v, err := (&Backend{Backend: cpu.New(), Path: "/nonexistent"}).DequantFP8(ctx, codes, scales, g)
		if err != nil {
			t.Fatal(err)
		}
		p := &kernels.Packed{Kind: "fp8", Rows: rows, Cols: cols, Data: codes, Scales: scales, R: 16, C: 32, E5M2: e5, Inverse: !e5}
		srcs = append(srcs, valuesSource{rows, cols, v, p})
	}
	for k, s := range srcs {
		want, err := cpu.New().Stats(ctx, s, kernels.StatsOptions{Bins: 64})
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.Stats(ctx, s, kernels.StatsOptions{Bins: 64})
		if err != nil {
			t.Fatal(err)
		}
		if want.NaN == 0 || want.Inf == 0 {
			t.Fatalf("source %d: the CPU counts %d NaN and %d inf, the case wants both", k, want.NaN, want.Inf)
		}
		// band information is the source's: only the values are compared
		got.Scales, got.ScaleZero, got.ScaleHistogram, got.Codes, got.AtMax, got.AtMaxFraction = want.Scales, want.ScaleZero, want.ScaleHistogram, want.Codes, want.AtMax, want.AtMaxFraction
		sameStats(t, fmt.Sprintf("source %d (%s)", k, s.p.Kind), got, want)
	}
	if l.n() != 0 {
		t.Fatalf("fell back to the CPU: %s", l.all())
	}
}

// Bad integer weights get an error naming the rule, on every path; a GPU
// short of memory leaves the work to the CPU, which gives the same values.
func TestDequantIntErrorsAndFallback(t *testing.T) {
	ctx := context.Background()
	b, l := openFake(t, "lowmem")
	w := randomInt(GPTQ, 4, 512, 1024, 64, 1) // 2 MiB of output, the fake has 1 MiB free
	want, err := DequantIntCPU(w)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.DequantInt(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	sameF32(t, "low memory", got, want)
	if !strings.Contains(l.all(), "dequant_int runs on the CPU") {
		t.Fatalf("no fallback message: %q", l.all())
	}
	for _, c := range []struct {
		edit func(w *IntWeight)
		rule string
	}{
		{func(w *IntWeight) { w.Packed = w.Packed[:len(w.Packed)-4] }, "rule packed-size"},
		{func(w *IntWeight) { w.GIdx[3] = 4 }, "rule g_idx: entry 3 is 4"},
		{func(w *IntWeight) { w.Scales = w.Scales[:5] }, "rule int-scale-shape"},
		{func(w *IntWeight) { w.Zeros = w.Zeros[:1] }, "rule int-zero-shape"},
		{func(w *IntWeight) { w.Bits = 5 }, "rule int-layout"},
		{func(w *IntWeight) { w.Layout = AWQ; w.Rows = 12 }, "rule int-"},
	} {
		w := randomInt(GPTQ, 4, 16, 256, 64, 2)
		c.edit(w)
		if _, err := b.DequantInt(ctx, w); err == nil || !strings.Contains(err.Error(), c.rule) {
			t.Errorf("error %v, want %q", err, c.rule)
		}
		if _, err := DequantIntCPU(w); err == nil || !strings.Contains(err.Error(), c.rule) {
			t.Errorf("CPU: error %v, want %q", err, c.rule)
		}
	}
}
