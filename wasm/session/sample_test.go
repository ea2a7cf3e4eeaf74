package session

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/synth"
)

// A sample reports its own cost next to the session's running total, and a
// GPTQ or AWQ sample can start at any input column: its window holds the
// same values as the whole rows decoded locally.
func TestSampleCostAndColumns(t *testing.T) {
	for _, r := range []*synth.Repo{synth.GPTQInt4(), synth.AWQInt4()} {
		url, dir := serve(t, r)
		s, err := Open(context.Background(), r.ID, Options{Endpoint: url})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		src, err := hub.OpenLocal(filepath.Join(dir, filepath.FromSlash(r.ID)))
		if err != nil {
			t.Fatal(err)
		}
		local, err := checkpoint.Load(context.Background(), src, checkpoint.Options{ReadShapeTensors: true})
		if err != nil {
			t.Fatal(err)
		}
		name := "model.layers.0.mlp.down_proj"
		m, _ := local.Module(name)
		rows, cols := m.Matrix2D()
		if cols <= SampleWindow {
			t.Fatalf("%s: %d columns, want more than one window", r.ID, cols)
		}
		whole, err := scheme.Dequantize(m, local, 2, 5)
		if err != nil {
			t.Fatal(err)
		}
		first, err := s.SampleWindow(name, 2, 3, 0)
		if err != nil {
			t.Fatal(err)
		}
		if first.SampleBytes <= 0 || first.SampleRequests <= 0 || first.Bytes < first.SampleBytes {
			t.Errorf("%s: first sample cost %d B in %d requests, session total %d", r.ID, first.SampleBytes, first.SampleRequests, first.Bytes)
		}
		for _, c0 := range []int{SampleWindow, int(cols) - 100} {
			v, err := s.SampleWindow(name, 2, 3, c0)
			if err != nil {
				t.Fatal(err)
			}
			c1 := min(int(cols), c0+SampleWindow)
			if v.ColStart != c0 || v.ColEnd != c1 || len(v.Values) != 3*(c1-c0) {
				t.Fatalf("%s from %d: window %d:%d, %d values", r.ID, c0, v.ColStart, v.ColEnd, len(v.Values))
			}
			for i := range 3 {
				for j := range c1 - c0 {
					if v.Values[i*(c1-c0)+j] != whole[i*int(cols)+c0+j] {
						t.Fatalf("%s: [%d, %d] differs from the whole row", r.ID, 2+i, c0+j)
					}
				}
			}
			if v.Bytes-first.Bytes < v.SampleBytes || v.SampleBytes >= v.Bytes {
				t.Errorf("%s: sample cost %d B is not its own (total %d, first %d)", r.ID, v.SampleBytes, v.Bytes, first.Bytes)
			}
		}
		if _, err := s.SampleWindow(name, 0, 1, int(cols)); err == nil || !strings.Contains(err.Error(), "column") {
			t.Errorf("%s: column past the end: %v", r.ID, err)
		}
		_ = rows
	}
}

// The scale plot is never drawn on a made-up axis: a dense weight has no
// scales and says so; scales that are all 0 say why nothing is drawn; some
// zeros are left out and counted.
func TestScaleNote(t *testing.T) {
	dense := &scheme.Module{Format: "bf16"}
	fp8 := &scheme.Module{Format: "fp8", Quantized: true}
	for _, c := range []struct {
		m      *scheme.Module
		scales []float32
		note   string
		counts int
	}{
		{dense, nil, "stored unquantized (bf16): no scales", 0},
		{fp8, []float32{0, 0, 0, 0}, "all 4 scales of these rows are 0 or not finite", 0},
		{fp8, []float32{0, 0.5, 0.25, 0.125}, "1 of 4 scales are 0 or not finite", 3},
		{fp8, []float32{0.5, 0.25}, "", 2},
	} {
		h, note := scaleHistogram(c.m, c.scales)
		n := 0
		for _, k := range h.Counts {
			n += k
		}
		if !strings.HasPrefix(note, c.note) || (c.note == "" && note != "") || n != c.counts || (c.counts == 0 && h.Counts != nil) {
			t.Errorf("%v: note %q, %d counted (%v)", c.scales, note, n, h.Counts)
		}
	}
}
