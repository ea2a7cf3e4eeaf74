package cpu_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/quantscope/quantscope/companion/ops"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
)

// Full-module dequantization through the streamed pipeline (scheme's row
// decoders under the CPU backend), against a memmove of the same output
// measured in alternation. The module is held in memory and read as a
// checkpoint would be (a copy into each decoder's buffer); the output goes
// to the bands, reused, as it does on its way to a file. 2048×8192: 64 MiB
// of float32 output, the size of the numeric decoders' large case.
const benchRows, benchCols = 2048, 8192

// memTensors serves tensors from one in-memory safetensors file, reading
// into the caller's buffer as checkpoint.Checkpoint does.
type memTensors struct {
	h    *safetensors.Header
	data []byte
}

func (m *memTensors) at(name string, off, n int64) ([]byte, error) {
	t, ok := m.h.Lookup(name)
	if !ok || off < 0 || uint64(off+n) > t.NBytes() {
		return nil, fmt.Errorf("tensor %q: read [%d, %d) outside", name, off, off+n)
	}
	s := m.h.DataStart() + int64(t.Begin) + off
	return m.data[s : s+n], nil
}

func (m *memTensors) ReadTensor(name string, off, n int64) ([]byte, error) {
	b, err := m.at(name, off, n)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}

func (m *memTensors) ReadTensorInto(name string, dst []byte, off int64) error {
	b, err := m.at(name, off, int64(len(dst)))
	if err == nil {
		copy(dst, b)
	}
	return err
}

func benchModule(b *testing.B, format string, nrows int) (*scheme.Module, *memTensors) {
	r := rand.New(rand.NewPCG(7, 8))
	rnd := func(n int, code func() byte) []byte {
		out := make([]byte, n)
		for i := range out {
			out[i] = code()
		}
		return out
	}
	e4m3 := func() byte { return byte(r.IntN(0x7E)) | byte(r.IntN(2))<<7 } // any finite code
	var ts []safetensors.WriteTensor
	var s *scheme.Scheme
	switch format {
	case "nvfp4":
		scale2 := make([]byte, 4)
		copy(scale2, []byte{0, 0, 0x80, 0x3B}) // 2^-8
		ts = []safetensors.WriteTensor{
			{Name: "m.weight", DType: safetensors.U8, Shape: []uint64{uint64(nrows), benchCols / 2}, Data: rnd(nrows*benchCols/2, func() byte { return byte(r.Uint32()) })},
			{Name: "m.weight_scale", DType: safetensors.F8_E4M3, Shape: []uint64{uint64(nrows), benchCols / 16}, Data: rnd(nrows*benchCols/16, func() byte { return byte(r.IntN(0x7E)) })},
			{Name: "m.weight_scale_2", DType: safetensors.F32, Shape: []uint64{}, Data: scale2},
		}
		s = &scheme.Scheme{Method: "modelopt", Family: scheme.FamilyNVFP4}
	case "fp8-block":
		scales := make([]float32, (nrows/128)*(benchCols/128))
		for i := range scales {
			scales[i] = float32(r.Float64()) * 1e-3
		}
		sb := make([]byte, 4*len(scales))
		for i, v := range scales {
			binary.LittleEndian.PutUint32(sb[4*i:], math.Float32bits(v))
		}
		ts = []safetensors.WriteTensor{
			{Name: "m.weight", DType: safetensors.F8_E4M3, Shape: []uint64{uint64(nrows), benchCols}, Data: rnd(nrows*benchCols, e4m3)},
			{Name: "m.weight_scale_inv", DType: safetensors.F32, Shape: []uint64{uint64(nrows) / 128, benchCols / 128}, Data: sb},
		}
		s = &scheme.Scheme{Method: "fp8", Family: scheme.FamilyFP8}
	}
	data, err := safetensors.Encode(ts, nil)
	if err != nil {
		b.Fatal(err)
	}
	h, err := safetensors.Parse("bench.safetensors", data)
	if err != nil {
		b.Fatal(err)
	}
	var infos []scheme.TensorInfo
	for _, t := range h.Tensors {
		infos = append(infos, scheme.TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape, NBytes: t.NBytes()})
	}
	mods := scheme.Group(infos, s, nil)
	if len(mods) != 1 || mods[0].Format != map[string]string{"nvfp4": scheme.FormatNVFP4, "fp8-block": scheme.FormatFP8}[format] {
		b.Fatalf("grouped %d modules", len(mods))
	}
	return mods[0], &memTensors{h: h, data: data}
}

// benchRatio times the module's streamed dequantization on workers cores
// and a memmove of the same output size in alternation, and reports the
// dequantization's output bandwidth as a percentage of memmove's.
func benchRatio(b *testing.B, format string) {
	m, mem := benchModule(b, format, benchRows)
	src, err := ops.ModuleSource(m, mem)
	if err != nil {
		b.Fatal(err)
	}
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			be := &cpu.Backend{Workers: workers}
			n := benchRows * benchCols
			from, to := make([]float32, n), make([]float32, n)
			copy(to, from) // fault the pages in before timing
			be.Dequantize(context.Background(), src, kernels.DequantOptions{}, func(*kernels.Band) error { return nil })
			sink := func(*kernels.Band) error { return nil }
			var tMove, tDec, cMove, cDec time.Duration
			b.SetBytes(4 * int64(n))
			for b.Loop() {
				c0, t0 := cpuTime(), time.Now()
				copy(to, from)
				c1, t1 := cpuTime(), time.Now()
				if err := be.Dequantize(context.Background(), src, kernels.DequantOptions{}, sink); err != nil {
					b.Fatal(err)
				}
				c2, t2 := cpuTime(), time.Now()
				tMove += t1.Sub(t0)
				tDec += t2.Sub(t1)
				cMove += c1 - c0
				cDec += c2 - c1
			}
			b.ReportMetric(100*float64(tMove)/float64(tDec), "%memmove")
			// By CPU time (the process's user + system): the share of a
			// core's memmove bandwidth each decoding core gives, whatever
			// the other sessions on the machine take from the wall clock.
			b.ReportMetric(100*float64(cMove)/float64(cDec), "%memmove-cpu")
			b.ReportMetric(float64(4*int64(n)*int64(b.N))/tDec.Seconds()/1e9, "GB/s")
		})
	}

	// Two cores against one, timed in alternation on the same module so
	// that the machine's other load falls on both alike: on the 64 MiB
	// module above and on one of 256 MiB. Each run of two workers follows a
	// run of one, and so starts by waking the idle second core; on a VM
	// whose idle vCPU halts that costs a fraction of a millisecond, more
	// than a 64 MiB stream can hide. The reference measures the machine's
	// own answer: a pure compute loop (no memory, nothing shared) of the
	// same duration as the one-worker stream, on one goroutine and then
	// split over two, in the same alternation ("ref-x2/1"). What the
	// pipeline loses beyond the reference is its own.
	//
	// Two ways out of the stream: "each", the bands handed to per-band work
	// in any order (Each with no sink: what decode --out, which writes each
	// band at its offset, and stats run), and "ordered", the bands handed
	// to a sink in row order (decode --json, quantize's read of a module),
	// where a stalled worker holds the other back once its bands wait.
	each := kernels.DequantOptions{Each: func(int, *kernels.Band) error { return nil }}
	modes := []struct {
		name string
		opt  kernels.DequantOptions
		sink func(*kernels.Band) error
	}{
		{"each", each, nil},
		{"ordered", kernels.DequantOptions{}, func(*kernels.Band) error { return nil }},
	}
	for _, rows := range []int{benchRows, 4 * benchRows} {
		m, mem := benchModule(b, format, rows)
		src, err := ops.ModuleSource(m, mem)
		if err != nil {
			b.Fatal(err)
		}
		for _, mode := range modes {
			b.Run(fmt.Sprintf("scaling/%s/out=%dMiB", mode.name, 4*rows*benchCols>>20), func(b *testing.B) {
				benchScaling(b, src, rows, mode.opt, mode.sink)
			})
		}
	}
}

// benchScaling times src's dequantization on one worker and on two in
// alternation, with the compute reference between.
func benchScaling(b *testing.B, src kernels.RowSource, rows int, opt kernels.DequantOptions, sink func(*kernels.Band) error) {
	one, two := &cpu.Backend{Workers: 1}, &cpu.Backend{Workers: 2}
	perUnit := spinCost()
	var t1, t2, r1, r2 time.Duration
	b.SetBytes(4 * int64(rows) * benchCols)
	for b.Loop() {
		t0 := time.Now()
		if err := one.Dequantize(context.Background(), src, opt, sink); err != nil {
			b.Fatal(err)
		}
		tm := time.Now()
		if err := two.Dequantize(context.Background(), src, opt, sink); err != nil {
			b.Fatal(err)
		}
		te := time.Now()
		t1 += tm.Sub(t0)
		t2 += te.Sub(tm)
		units := int(float64(tm.Sub(t0)) / perUnit)
		spinSink += spin(units)
		tr := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() { spinSink2 = spin(units / 2) })
		spinSink += spin(units - units/2)
		wg.Wait()
		r1 += tr.Sub(te)
		r2 += time.Since(tr)
	}
	b.ReportMetric(float64(t1)/float64(t2), "x2/1")
	b.ReportMetric(float64(r1)/float64(r2), "ref-x2/1")
}

// spin is a dependent chain of integer multiply-adds: compute alone, so two
// goroutines running it on two cores scale by what the machine allows.
func spin(units int) uint64 {
	x := uint64(units) | 1
	for range units {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

var spinSink, spinSink2 uint64

// spinCost is the nanoseconds one unit of spin takes on one core.
func spinCost() float64 {
	const n = 1 << 24
	t := time.Now()
	spinSink += spin(n)
	return float64(time.Since(t)) / n
}

func BenchmarkRatioModuleNVFP4(b *testing.B)    { benchRatio(b, "nvfp4") }
func BenchmarkRatioModuleFP8Block(b *testing.B) { benchRatio(b, "fp8-block") }
