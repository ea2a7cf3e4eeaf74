package ops

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/synth"
)

func loadDir(t *testing.T, dir string) *checkpoint.Checkpoint {
	t.Helper()
	src, err := hub.OpenLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.Load(context.Background(), src, checkpoint.Options{ReadShapeTensors: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func loadRepo(t *testing.T, r *synth.Repo) *checkpoint.Checkpoint {
	t.Helper()
	dir := t.TempDir()
	if err := r.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	return loadDir(t, dir)
}

// plainReader hides ReadTensorInto, so the decoders' allocating path runs too.
type plainReader struct{ c *checkpoint.Checkpoint }

func (p plainReader) ReadTensor(name string, off, n int64) ([]byte, error) {
	return p.c.ReadTensor(name, off, n)
}

func collect(t *testing.T, src kernels.RowSource, chunk int) []float32 {
	t.Helper()
	var out []float32
	err := cpu.New().Dequantize(context.Background(), src, kernels.DequantOptions{ChunkBytes: chunk, WantMeta: true}, func(b *kernels.Band) error {
		out = append(out, b.Values...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameBits(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// Every module of every generated format, streamed in small bands (with and
// without reads into the decoders' buffers), is bit for bit scheme.Dequantize.
func TestStreamEqualsDequantize(t *testing.T) {
	for _, r := range synth.All() {
		c := loadRepo(t, r)
		n := 0
		for _, m := range c.Modules {
			if m.Format == scheme.FormatNone {
				continue
			}
			rows, cols := m.Matrix2D()
			want, err := scheme.Dequantize(m, c, 0, int(rows))
			if err != nil {
				t.Fatalf("%s %s: %v", r.ID, m.Name, err)
			}
			for _, reader := range []scheme.TensorReader{c, plainReader{c}} {
				src, err := ModuleSource(m, reader)
				if err != nil {
					t.Fatalf("%s %s: %v", r.ID, m.Name, err)
				}
				if i := sameBits(collect(t, src, int(cols)*4*5), want); i >= 0 {
					t.Fatalf("%s %s (%T): streamed value %d differs from Dequantize", r.ID, m.Name, reader, i)
				}
			}
			n++
		}
		if n == 0 {
			t.Fatalf("%s: no modules decoded", r.ID)
		}
	}
}

// plainScaleHist counts |s| on log2 bins the plain way.
func plainScaleHist(scales []float32) (map[float64]int64, int64) {
	h := map[float64]int64{}
	var zero int64
	for _, s := range scales {
		a := math.Abs(float64(s))
		if a == 0 {
			zero++
			continue
		}
		h[math.Pow(2, math.Floor(math.Log2(a)))]++
	}
	return h, zero
}

// plainAtMax counts the stored codes at the format's largest magnitude
// straight from the weight's bytes (NVFP4, MXFP4, FP8), or from the sample's
// code counts (int formats: either end of the range).
func plainAtMax(t *testing.T, c *checkpoint.Checkpoint, m *scheme.Module, smp *scheme.Sample) (codes, atMax int64) {
	switch m.Format {
	case scheme.FormatNVFP4, scheme.FormatMXFP4:
		w, ok := m.Info("weight")
		if !ok {
			if w, ok = m.Info("weight_packed"); !ok {
				w, _ = m.Info("blocks")
			}
		}
		b, err := c.ReadTensor(w.Name, 0, int64(w.NBytes))
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range b {
			for _, nib := range []byte{x & 15, x >> 4} {
				codes++
				if math.Abs(float64(numeric.E2M1ToFloat32(nib))) == 6 {
					atMax++
				}
			}
		}
	case scheme.FormatFP8:
		w, _ := m.Info("weight")
		b, _ := c.ReadTensor(w.Name, 0, int64(w.NBytes))
		v, _ := numeric.Decode(w.DType, b)
		for _, x := range v {
			codes++
			if math.Abs(float64(x)) == 448 {
				atMax++
			}
		}
	default:
		if strings.HasPrefix(smp.CodeKind, "int") {
			lo, hi := smp.Codes[0].Code, smp.Codes[len(smp.Codes)-1].Code
			for _, k := range smp.Codes {
				codes += int64(k.Count)
				if k.Code == lo || k.Code == hi {
					atMax += int64(k.Count)
				}
			}
		}
	}
	return codes, atMax
}

// Statistics of every module of every generated format against a plain
// computation over the fully decoded weight.
func TestStatsAgainstPlain(t *testing.T) {
	for _, r := range synth.All() {
		c := loadRepo(t, r)
		env := Env{Checkpoint: c, Backend: cpu.New()}
		for _, m := range c.Modules {
			if m.Format == scheme.FormatNone {
				continue
			}
			rows, cols := m.Matrix2D()
			all, err := scheme.Dequantize(m, c, 0, int(rows))
			if err != nil {
				t.Fatal(err)
			}
			doc, err := ModuleStats(context.Background(), env, m.Name, StatsParams{Bins: 50})
			if err != nil {
				t.Fatalf("%s %s: %v", r.ID, m.Name, err)
			}
			where := r.ID + " " + m.Name
			st := scheme.ValueStats(all)
			if doc.Shape != [2]int{int(rows), int(cols)} || float64(doc.Min) != st.Min || float64(doc.Max) != st.Max ||
				doc.NaN != int64(st.NaN) || doc.Inf != int64(st.Inf) {
				t.Fatalf("%s: %+v, plain %+v", where, doc, st)
			}
			if math.Abs(float64(doc.Mean)-st.Mean) > 1e-12 || math.Abs(float64(doc.Std)-st.Std) > 1e-9*st.Std {
				t.Fatalf("%s: mean %v std %v, plain %v %v", where, doc.Mean, doc.Std, st.Mean, st.Std)
			}
			h := doc.Histogram
			want := plainHistogram(all, h.Edges)
			var total int64
			for i := range want {
				if want[i] != h.Counts[i] {
					t.Fatalf("%s: bin %d [%v, %v]: %d, plain %d", where, i, h.Edges[i], h.Edges[i+1], h.Counts[i], want[i])
				}
				total += want[i]
			}
			if total != int64(len(all)-st.NaN-st.Inf) || len(h.Counts) > 50 {
				t.Fatalf("%s: histogram holds %d of %d values in %d bins", where, total, len(all), len(h.Counts))
			}
			smp, err := scheme.SampleRows(m, c, 0, int(rows), 0, int(cols))
			if err != nil {
				t.Fatal(err)
			}
			ph, zero := plainScaleHist(smp.Scales)
			if doc.Scales != int64(len(smp.Scales)) || doc.ScaleZero != zero {
				t.Fatalf("%s: %d scales (%d zero), plain %d (%d)", where, doc.Scales, doc.ScaleZero, len(smp.Scales), zero)
			}
			for i, n := range doc.ScaleHistogram.Counts {
				if e := doc.ScaleHistogram.Edges[i]; ph[e] != n || doc.ScaleHistogram.Edges[i+1] != 2*e {
					t.Fatalf("%s: scale bin [%v, %v) holds %d, plain %d", where, e, doc.ScaleHistogram.Edges[i+1], n, ph[e])
				}
				delete(ph, doc.ScaleHistogram.Edges[i])
			}
			if len(ph) > 0 {
				t.Fatalf("%s: scale bins missing: %v", where, ph)
			}
			codes, atMax := plainAtMax(t, c, m, smp)
			if doc.Codes != codes || (codes > 0 && float64(doc.AtMaxFraction) != float64(atMax)/float64(codes)) || (codes == 0 && !math.IsNaN(float64(doc.AtMaxFraction))) {
				t.Fatalf("%s: at max %v of %d codes, plain %d of %d", where, doc.AtMaxFraction, doc.Codes, atMax, codes)
			}
			if m.Format == scheme.FormatNVFP4 {
				checkE4M3Scales(t, c, m, doc)
			}
		}
	}
}

func checkE4M3Scales(t *testing.T, c *checkpoint.Checkpoint, m *scheme.Module, doc *StatsDoc) {
	sc, _ := m.Info("weight_scale")
	b, _ := c.ReadTensor(sc.Name, 0, int64(sc.NBytes))
	var top, sub int64
	for _, x := range b {
		v := numeric.E4M3ToFloat32(x)
		if math.Abs(float64(v)) == 448 {
			top++
		}
		if v != 0 && math.Abs(float64(v)) < math.Ldexp(1, -6) { // below E4M3's smallest normal
			sub++
		}
	}
	if sc.DType != safetensors.F8_E4M3 || doc.ScaleE4M3 != int64(len(b)) ||
		float64(doc.ScaleAtMaxFraction) != float64(top)/float64(len(b)) || float64(doc.ScaleSubnormalFraction) != float64(sub)/float64(len(b)) {
		t.Fatalf("%s: E4M3 scales %d, at max %v, subnormal %v; plain %d, %d, %d", m.Name, doc.ScaleE4M3, doc.ScaleAtMaxFraction, doc.ScaleSubnormalFraction, len(b), top, sub)
	}
}

func TestStatsOp(t *testing.T) {
	c := loadRepo(t, synth.ModelOptNVFP4())
	op, ok := Lookup("stats")
	if !ok {
		t.Fatal("stats not registered")
	}
	env := Env{Checkpoint: c, Backend: cpu.New()}
	var last, total int64
	env.Progress = func(d, tot int64) { last, total = d, tot }
	res, err := op(context.Background(), env, "model.layers.0.mlp.up_proj", json.RawMessage(`{"bins":16}`))
	if err != nil {
		t.Fatal(err)
	}
	doc := res.JSON.(*StatsDoc)
	if len(doc.Histogram.Counts) > 16 || len(res.Arrays) != 2 || res.Arrays[0].Name != "histogram.counts" || len(res.Arrays[0].I64) != len(doc.Histogram.Counts) {
		t.Fatalf("result %+v", res)
	}
	if last != 768 || total != 768 {
		t.Fatalf("progress ended at %d/%d, want 768/768", last, total)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	json.Unmarshal(b, &back)
	for _, k := range []string{"name", "shape", "min", "max", "mean", "std", "nan", "inf", "histogram", "scale_histogram", "at_max_fraction"} {
		if _, ok := back[k]; !ok {
			t.Errorf("stats JSON lacks %q: %s", k, b)
		}
	}
	_, err = op(context.Background(), env, "model.layers.7.mlp.up_proj", nil)
	if err == nil || !strings.Contains(err.Error(), `"model.layers.7.mlp.up_proj"`) {
		t.Fatalf("unknown module: %v", err)
	}
	if _, err := op(context.Background(), env, "model.layers.0.mlp.up_proj", json.RawMessage(`{"bins":-2}`)); err == nil {
		t.Fatal("bins -2 accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := op(ctx, env, "model.layers.0.mlp.up_proj", nil); err == nil {
		t.Fatal("a cancelled job succeeded")
	}
}

// A module read from a (sparse) file on disk streams within the stated
// working set: nothing is allocated per band once the pool has grown.
func TestStreamMemoryBoundOnDisk(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := synth.WriteDeepSeekR1FP4Shape(dir, 1); err != nil {
		t.Fatal(err)
	}
	c := loadDir(t, filepath.Clean(dir))
	m, err := FindModule(c, "model.layers.3.mlp.experts.0.gate_proj")
	if err != nil {
		t.Fatal(err)
	}
	src, err := ModuleSource(m, c)
	if err != nil {
		t.Fatal(err)
	}
	rows, cols := src.Shape()
	const chunk, workers = 128 << 10, 2
	bound := uint64(3 * workers * chunk)
	output := uint64(rows * cols * 4)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	seen := 0
	err = (&cpu.Backend{Workers: workers}).Dequantize(context.Background(), src, kernels.DequantOptions{ChunkBytes: chunk}, func(b *kernels.Band) error {
		seen += len(b.Values)
		return nil
	})
	runtime.ReadMemStats(&after)
	if err != nil || uint64(seen)*4 != output {
		t.Fatalf("streamed %d values: %v", seen, err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > bound+1<<20 || output < 32*bound {
		t.Fatalf("streaming %d MiB allocated %d KiB; bound %d KiB", output>>20, got>>10, bound>>10)
	}
}

// plainHistogram counts v into the bins of edges by the documented rule: a
// value on an interior edge belongs to the bin farther from zero, zero to
// the bin above it, the outer bins hold min and max.
func plainHistogram(v []float32, edges []float64) []int64 {
	nb := len(edges) - 1
	counts := make([]int64, nb)
	for _, x := range v {
		f := float64(x)
		if f != f || math.IsInf(f, 0) {
			continue
		}
		i := 0
		for i+1 < nb && (edges[i+1] < f || (f >= 0 && edges[i+1] == f)) {
			i++
		}
		counts[i]++
	}
	return counts
}
