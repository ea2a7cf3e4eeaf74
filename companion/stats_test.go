package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/synth"
)

func TestStatsCLI(t *testing.T) {
	dir := demo(t)
	src := filepath.Join(dir, synth.ModelOptNVFP4().ID)
	name := "model.layers.1.mlp.gate_proj"
	stdout, stderr, code := runMain(t, "stats", "--json", "--bins", "20", src, name)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if stderr != "" {
		t.Errorf("stderr %q: no progress bar when stderr is not a terminal", stderr)
	}
	var doc struct {
		Name                string
		Shape               []int
		Min, Max, Mean, Std float64
		NaN                 int64 `json:"nan"`
		Inf                 int64 `json:"inf"`
		Histogram           hist
		ScaleHistogram      hist     `json:"scale_histogram"`
		AtMaxFraction       *float64 `json:"at_max_fraction"`
		ScaleAtMaxFraction  *float64 `json:"scale_at_max_fraction"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("%v: %q", err, stdout)
	}
	// The values the statistics describe: decoded here the plain way.
	c := loadLocal(t, src)
	m, _ := c.Module(name)
	all, err := scheme.Dequantize(m, c, 0, 768)
	if err != nil {
		t.Fatal(err)
	}
	st := scheme.ValueStats(all)
	if doc.Name != name || len(doc.Shape) != 2 || doc.Shape[0] != 768 || doc.Shape[1] != 256 ||
		doc.Min != st.Min || doc.Max != st.Max || math.Abs(doc.Mean-st.Mean) > 1e-12 || math.Abs(doc.Std-st.Std) > 1e-9 {
		t.Fatalf("stats %+v, plain %+v", doc, st)
	}
	var n int64
	for _, k := range doc.Histogram.Counts {
		n += k
	}
	if n != int64(len(all)) || len(doc.Histogram.Counts) > 20 || len(doc.Histogram.Edges) != len(doc.Histogram.Counts)+1 {
		t.Fatalf("histogram holds %d of %d values in %d bins", n, len(all), len(doc.Histogram.Counts))
	}
	if doc.AtMaxFraction == nil || *doc.AtMaxFraction <= 0 || doc.ScaleAtMaxFraction == nil || len(doc.ScaleHistogram.Counts) == 0 {
		t.Fatalf("codes and scales missing: %s", stdout)
	}

	// Human output: the same numbers, and the histograms.
	stdout, _, code = runMain(t, "stats", src, name)
	if code != 0 || !strings.HasPrefix(stdout, name+"  [768, 256]  nvfp4\n") || !strings.Contains(stdout, "values:\n") ||
		!strings.Contains(stdout, "scales (log2 bins):\n") || !strings.Contains(stdout, "at the format's largest code:") {
		t.Fatalf("human output: %d %q", code, stdout)
	}

	// A dense module has no codes: null fraction, not a made-up zero.
	stdout, _, code = runMain(t, "stats", "--json", src, "lm_head")
	if code != 0 || !strings.Contains(stdout, `"at_max_fraction":null`) {
		t.Fatalf("dense: %d %q", code, stdout)
	}

	for _, bad := range [][]string{
		{"stats", src, "model.layers.9.mlp.up_proj"},
		{"stats", "--bins", "0", src, name},
		{"stats", src},
	} {
		stdout, stderr, code := runMain(t, bad...)
		first, _, _ := strings.Cut(stderr, "\n")
		if code != 1 || stdout != "" || !strings.HasPrefix(first, "error: ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", bad, code, stdout, stderr)
		}
		if len(bad) == 3 && bad[2] == "model.layers.9.mlp.up_proj" && !strings.Contains(first, `"model.layers.9.mlp.up_proj"`) {
			t.Errorf("unknown module: %q does not name it", first)
		}
	}
}

type hist struct {
	Edges  []float64
	Counts []int64
}

func loadLocal(t *testing.T, dir string) *checkpoint.Checkpoint {
	t.Helper()
	s, err := hub.OpenLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.Load(context.Background(), s, checkpoint.Options{ReadShapeTensors: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// decode --out of a module of every format is scheme.Dequantize's values,
// little-endian, whole and as a row slice.
func TestDecodeOutEveryFormat(t *testing.T) {
	dir := demo(t)
	for _, r := range synth.All() {
		src := filepath.Join(dir, r.ID)
		c := loadLocal(t, src)
		var m *scheme.Module
		for _, x := range c.Modules {
			if x.Quantized && x.Format != scheme.FormatNone {
				m = x
				break
			}
		}
		if m == nil {
			continue
		}
		rows, _ := m.Matrix2D()
		for _, rs := range []string{"", "1:" + itoa(int(rows)-1)} {
			lo, hi := 0, int(rows)
			args := []string{"decode"}
			if rs != "" {
				lo, hi = 1, int(rows)-1
				args = append(args, "--rows", rs)
			}
			out := filepath.Join(t.TempDir(), "w.f32")
			if _, stderr, code := runMain(t, append(args, "--out", out, src, m.Name)...); code != 0 {
				t.Fatalf("%s %s: %s", r.ID, m.Name, stderr)
			}
			want, err := scheme.Dequantize(m, c, lo, hi)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := os.ReadFile(out)
			wb := make([]byte, 4*len(want))
			for i, v := range want {
				binary.LittleEndian.PutUint32(wb[4*i:], math.Float32bits(v))
			}
			if !bytes.Equal(raw, wb) {
				t.Fatalf("%s %s rows %q: --out differs from Dequantize (%d vs %d bytes)", r.ID, m.Name, rs, len(raw), len(wb))
			}
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// jsonFloat is how decode --json wrote values before it streamed: the
// reference for the streamed formatter.
func jsonFloat(v float32) any {
	switch {
	case v != v:
		return "NaN"
	case math.IsInf(float64(v), 1):
		return "Infinity"
	case math.IsInf(float64(v), -1):
		return "-Infinity"
	}
	return float64(v)
}

func TestJSONValuesAsEncodingJSON(t *testing.T) {
	vals := []float32{0, float32(math.Copysign(0, -1)), 1, -1.5, 0.1, 1e-6, 9.99e-7, -3e-8, 1e-45, 3.4e38, 1e21, 123456.78,
		float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0.015625, 2.5e-5}
	anys := make([]any, len(vals))
	for i, v := range vals {
		anys[i] = jsonFloat(v)
	}
	want, _ := json.Marshal(map[string]any{"name": "a<b", "shape": []int{1, len(vals)}, "values": anys})
	got := appendJSONHead(nil, "a<b", 1, len(vals))
	got = appendJSONValues(got, vals[:5], true)
	got = appendJSONValues(got, vals[5:], false)
	got = append(got, "]}"...)
	if string(got) != string(want) {
		t.Fatalf("streamed JSON\n%s\nencoding/json\n%s", got, want)
	}
}

func TestProgressBarOnlyOnTerminals(t *testing.T) {
	var b bytes.Buffer
	p := newProgressBar(&b, "x")
	p.Report(1, 2)
	p.Report(2, 2)
	p.Done()
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	q := newProgressBar(f, "x")
	q.Report(2, 2)
	q.Done()
	fi, _ := f.Stat()
	if b.Len() != 0 || fi.Size() != 0 {
		t.Fatalf("progress drawn on a buffer (%d bytes) or a file (%d bytes)", b.Len(), fi.Size())
	}
	tty := &progressBar{w: &b, label: "stats m"} // what a terminal gets
	tty.Report(1, 4)
	tty.Report(4, 4)
	tty.Done()
	if !strings.Contains(b.String(), "stats m  25% [#######") || !strings.Contains(b.String(), "100% [###") {
		t.Fatalf("bar %q", b.String())
	}
}
