package cuda

// Parity of the dequant_int and stats kernels on a real GPU with the CPU
// (skipped, saying why, without one: see gpuBackend), and their
// benchmarks (gpu-check.sh runs every BenchmarkGPU).

import (
	"context"
	"fmt"
	"github.com/quantscope/quantscope/companion/ops"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/kernels/cuda/wire"
)

// randomInt is an integer weight with every code, scales over many
// binades, zero points and a shuffled g_idx.
func randomInt(l IntLayout, bits, rows, cols, group int, seed uint64) *IntWeight {
	r := rand.New(rand.NewPCG(seed, uint64(bits)))
	groups := (cols + group - 1) / group
	w := &IntWeight{Layout: l, Bits: bits, Rows: rows, Cols: cols, Scales: make([]float32, rows*groups), Zeros: make([]float32, rows*groups), GIdx: make([]int32, cols)}
	for i := range w.Scales {
		w.Scales[i] = float32(math.Ldexp(r.Float64()+0.5, r.IntN(40)-30))
		w.Zeros[i] = float32(r.IntN(1 << bits))
	}
	for i := range w.GIdx {
		w.GIdx[i] = int32(i / group)
	}
	r.Shuffle(cols, func(i, j int) { w.GIdx[i], w.GIdx[j] = w.GIdx[j], w.GIdx[i] })
	var err error
	switch l {
	case CTBitstream, CTPerWord:
		codes := make([]int8, rows*cols)
		for i := range codes {
			codes[i] = int8(r.IntN(1<<bits) - 1<<(bits-1))
		}
		for i := range w.Zeros {
			w.Zeros[i] -= float32(int(1) << (bits - 1))
		}
		pl := packing.CTBitstream
		if l == CTPerWord {
			pl = packing.CTPerWord
		}
		w.Packed, err = packing.PackCT(codes, rows, cols, bits, pl)
	default:
		codes := make([]uint8, rows*cols)
		for i := range codes {
			codes[i] = uint8(r.IntN(1 << bits))
		}
		if l == GPTQ {
			w.Packed, err = packing.PackGPTQWeight(codes, cols, rows, bits)
		} else {
			w.Packed, err = packing.PackAWQ(codes, cols, rows)
		}
	}
	if err != nil {
		panic(err)
	}
	return w
}

func gpuIntCases() []*IntWeight {
	var cs []*IntWeight
	for bits := 1; bits <= 8; bits++ {
		cs = append(cs, randomInt(CTBitstream, bits, 300, 1000, 128, uint64(bits)), randomInt(CTPerWord, bits, 97, 768, 64, uint64(bits)))
	}
	for _, bits := range []int{2, 3, 4, 8} {
		cs = append(cs, randomInt(GPTQ, bits, 1024, 2048, 128, 10+uint64(bits)))
	}
	return append(cs, randomInt(AWQ, 4, 1024, 2048, 128, 20), randomInt(GPTQ, 4, 4096, 8192, 128, 21)) // 32M values: several steps
}

func TestGPUParityDequantInt(t *testing.T) {
	b := gpuBackend(t)
	ctx := context.Background()
	for _, w := range gpuIntCases() {
		want, err := DequantIntCPU(w)
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.DequantInt(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		sameF32(t, fmt.Sprintf("layout %d, %d bits, [%d, %d]", w.Layout, w.Bits, w.Rows, w.Cols), got, want)
	}
	for _, c := range packedModules(t) {
		rows, _ := c.m.Matrix2D()
		want, err := scheme.Dequantize(c.m, c.r, 0, int(rows))
		if err != nil {
			t.Fatal(err)
		}
		s, _ := scheme.OpenRows(c.m, c.r)
		p, err := s.Packed()
		if err != nil || p == nil {
			t.Fatal(c.name, err)
		}
		if p.Kind != "int" {
			continue
		}
		layouts := map[string]IntLayout{"ct-bitstream": CTBitstream, "ct-per-word": CTPerWord, "gptq": GPTQ, "awq": AWQ}
		got, err := b.DequantInt(ctx, &IntWeight{Layout: layouts[p.IntLayout], Bits: p.Bits, Rows: p.Rows, Cols: p.Cols, Packed: p.Data, Scales: p.Scales, Zeros: p.Zeros, GIdx: p.GIdx})
		if err != nil {
			t.Fatal(err)
		}
		sameF32(t, c.name, got, want)
	}
}

// TestGPUParityStats: every packed layout of formats/scheme, then weights
// of 36M values (two launches' worth: statsStep is 2^25), and NaN/inf.
func TestGPUParityStats(t *testing.T) {
	b := gpuBackend(t)
	ctx := context.Background()
	check := func(name string, src kernels.RowSource) {
		want, err := cpu.New().Stats(ctx, src, kernels.StatsOptions{})
		if err != nil {
			t.Fatal(name, err)
		}
		got, err := b.Stats(ctx, src, kernels.StatsOptions{})
		if err != nil {
			t.Fatal(name, err)
		}
		if _, ok := src.(valuesSource); ok { // no band information there
			got.Scales, got.ScaleZero, got.ScaleHistogram, got.Codes, got.AtMax, got.AtMaxFraction = want.Scales, want.ScaleZero, want.ScaleHistogram, want.Codes, want.AtMax, want.AtMaxFraction
		}
		sameStats(t, name, got, want)
	}
	for _, c := range packedModules(t) {
		src, err := ops.ModuleSource(c.m, c.r)
		if err != nil {
			t.Fatal(err)
		}
		check(c.name, src)
	}
	for _, w := range []*IntWeight{randomInt(GPTQ, 4, 6144, 6144, 128, 30), randomInt(CTBitstream, 3, 6000, 6000, 128, 31)} {
		w.Scales[5] = float32(math.NaN())
		w.Scales[9] = float32(math.Inf(1))
		v, err := DequantIntCPU(w)
		if err != nil {
			t.Fatal(err)
		}
		name := map[IntLayout]string{CTBitstream: "ct-bitstream", GPTQ: "gptq"}[w.Layout]
		p := &kernels.Packed{Kind: "int", IntLayout: name, Rows: w.Rows, Cols: w.Cols, Bits: w.Bits, Data: w.Packed, Scales: w.Scales, Zeros: w.Zeros, GIdx: w.GIdx}
		check(fmt.Sprintf("%s [%d, %d]", name, w.Rows, w.Cols), valuesSource{w.Rows, w.Cols, v, p})
	}
}

// BenchmarkGPUDequantInt decodes an 8192×4096 weight (outputs × inputs)
// of each layout to float32 (GPTQ with a shuffled g_idx).
func BenchmarkGPUDequantInt(b *testing.B) {
	gpuBackend(b)
	for _, c := range []struct {
		name string
		w    *IntWeight
	}{
		{"gptq4", randomInt(GPTQ, 4, 8192, 4096, 128, 1)},
		{"awq4", randomInt(AWQ, 4, 8192, 4096, 128, 2)},
		{"ct3", randomInt(CTBitstream, 3, 8192, 4096, 128, 3)},
	} {
		b.Run(c.name, func(b *testing.B) {
			groups, parts, err := c.w.parts()
			if err != nil {
				b.Fatal(err)
			}
			benchCall(b, c.w.request(wire.OpDequantInt, groups), int64(4*c.w.Rows*c.w.Cols), parts...)
		})
	}
}

// BenchmarkGPUStats computes the statistics of an 8192×4096 weight, GB/s
// of the float32 values it covers.
func BenchmarkGPUStats(b *testing.B) {
	gpuBackend(b)
	w := randomInt(GPTQ, 4, 8192, 4096, 128, 4)
	groups, parts, err := w.parts()
	if err != nil {
		b.Fatal(err)
	}
	n := int64(w.Rows * w.Cols)
	b.Run("gptq4", func(b *testing.B) { benchCall(b, w.request(wire.OpStats, groups), 4*n, parts...) })
	sc := randBytes(int(n/16), 2)
	for i := range sc {
		sc[i] &= 0x7F
	}
	b.Run("nvfp4", func(b *testing.B) {
		benchCall(b, wire.Request{Op: wire.OpStats, Global: 0.01, IntFields: wire.IntFields{Source: wire.SourceNVFP4}}, 4*n, randBytes(int(n/2), 1), sc)
	})
}
