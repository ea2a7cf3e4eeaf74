package cuda

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/kernels/cuda/wire"
)

// Stats computes a module's statistics on the GPU when the source hands
// over its stored form (kernels.PackedSource: compressed-tensors
// pack-quantized, GPTQ, AWQ, NVFP4, MXFP4, FP8 and MXFP8 modules read by
// formats/scheme) and the caller wants no bands back (no Sink or Each,
// not Moments alone); otherwise, or without a usable GPU, on the CPU.
//
// The packed bytes cross PCIe once; the worker decodes every value and
// reduces it in one pass (ptx/dequant_int.cu): counts, extremes, NaN and
// inf counts, codes at the end of their range and the 65536 top-16-bit
// buckets are exact, so the histogram's edges and counts are the CPU's;
// mean and std come from float64 block partials merged in block order,
// against the CPU's float64 lane sums merged in band order: the two agree
// to about 1e-12 relatively (the tests allow 1e-9). The scale histogram
// and the E4M3 scale counts are the host's, from the scales the source
// decoded (1/16 of the values at most).
func (b *Backend) Stats(ctx context.Context, src kernels.RowSource, opt kernels.StatsOptions) (*kernels.Stats, error) {
	cpuRun := func() (*kernels.Stats, error) { return b.Backend.Stats(ctx, src, opt) }
	ps, ok := src.(kernels.PackedSource)
	if !ok || opt.Sink != nil || opt.Each != nil || opt.Moments {
		return cpuRun()
	}
	p, err := ps.Packed()
	if err != nil {
		return nil, err
	}
	if p == nil {
		return cpuRun()
	}
	req, parts, meta, err := statsRequest(p)
	if err != nil {
		return cpuRun() // the CPU's decoders name the rule
	}
	var need int64 = 8*wire.StatsBuckets + (int64(p.Rows*p.Cols)>>25+1)*528*wire.StatsPartial
	for _, x := range parts {
		need += int64(len(x))
	}
	r, out, err := b.call(ctx, need, req, parts...)
	if err != nil {
		if _, ok := err.(*errFallback); ok {
			return cpuRun()
		}
		return nil, err
	}
	st, err := assemble(p.Rows, p.Cols, opt.Bins, out, meta, r)
	if err != nil {
		return nil, err
	}
	if opt.Progress != nil {
		opt.Progress(int64(p.Rows), int64(p.Rows))
	}
	return st, nil
}

// statsRequest is the stats request of a packed weight, and the band
// information the host works out (every real scale once, E4M3 counts).
func statsRequest(p *kernels.Packed) (wire.Request, [][]byte, *kernels.BandMeta, error) {
	n := int64(p.Rows) * int64(p.Cols)
	if p.Rows <= 0 || p.Cols <= 0 || p.Rows >= 1<<31 || p.Cols >= 1<<31 {
		return wire.Request{}, nil, nil, fmt.Errorf("[%d, %d] is empty or exceeds the kernels' 32-bit rows and columns", p.Rows, p.Cols)
	}
	meta := &kernels.BandMeta{Codes: n}
	switch p.Kind {
	case "int":
		layouts := map[string]IntLayout{"ct-bitstream": CTBitstream, "ct-per-word": CTPerWord, "gptq": GPTQ, "awq": AWQ}
		l, ok := layouts[p.IntLayout]
		if !ok {
			return wire.Request{}, nil, nil, fmt.Errorf("no integer layout %q", p.IntLayout)
		}
		w := &IntWeight{Layout: l, Bits: p.Bits, Rows: p.Rows, Cols: p.Cols, Packed: p.Data, Scales: p.Scales, Zeros: p.Zeros, GIdx: p.GIdx}
		groups, parts, err := w.parts()
		if err != nil {
			return wire.Request{}, nil, nil, err
		}
		meta.Scales = p.Scales
		return w.request(wire.OpStats, groups), parts, meta, nil
	case "nvfp4":
		if n%16 != 0 || int64(len(p.Data)) != n/2 || int64(len(p.ScaleCodes)) != n/16 {
			return wire.Request{}, nil, nil, fmt.Errorf("nvfp4: %d bytes and %d scales for [%d, %d]", len(p.Data), len(p.ScaleCodes), p.Rows, p.Cols)
		}
		meta.Scales = make([]float32, len(p.ScaleCodes))
		numeric.DecodeE4M3(meta.Scales, p.ScaleCodes)
		for i, c := range p.ScaleCodes {
			meta.Scales[i] *= p.Global
			switch {
			case c&0x7F == 0x7E:
				meta.ScaleAtMax++
			case c&0x78 == 0 && c&7 != 0:
				meta.ScaleSubnormal++
			}
		}
		meta.ScaleE4M3 = int64(len(p.ScaleCodes))
		req := wire.Request{Op: wire.OpStats, Rows: int64(p.Rows), Cols: int64(p.Cols), Global: p.Global, IntFields: wire.IntFields{Source: wire.SourceNVFP4}}
		return req, [][]byte{p.Data, p.ScaleCodes}, meta, nil
	case "mxfp4":
		if n%32 != 0 || int64(len(p.Data)) != n/2 || int64(len(p.ScaleCodes)) != n/32 {
			return wire.Request{}, nil, nil, fmt.Errorf("mxfp4: %d bytes and %d scales for [%d, %d]", len(p.Data), len(p.ScaleCodes), p.Rows, p.Cols)
		}
		meta.Scales = make([]float32, len(p.ScaleCodes))
		numeric.DecodeE8M0(meta.Scales, p.ScaleCodes)
		req := wire.Request{Op: wire.OpStats, Rows: int64(p.Rows), Cols: int64(p.Cols), IntFields: wire.IntFields{Source: wire.SourceMXFP4}}
		return req, [][]byte{p.Data, p.ScaleCodes}, meta, nil
	case "fp8":
		g := FP8Grid{Rows: p.Rows, Cols: p.Cols, R: p.R, C: p.C, E5M2: p.E5M2, Inverse: p.Inverse}
		if err := g.check(p.Data, p.Scales); err != nil {
			return wire.Request{}, nil, nil, err
		}
		meta.Scales = p.Scales
		if p.Inverse {
			meta.Scales = make([]float32, len(p.Scales))
			for i, v := range p.Scales {
				meta.Scales[i] = 1 / v
			}
		}
		req := wire.Request{Op: wire.OpStats, Rows: int64(p.Rows), Cols: int64(p.Cols), R: int64(p.R), C: int64(p.C), Inv: p.Inverse, E5M2: p.E5M2,
			IntFields: wire.IntFields{Source: wire.SourceFP8}}
		return req, [][]byte{p.Data, f32Bytes(p.Scales)}, meta, nil
	}
	return wire.Request{}, nil, nil, fmt.Errorf("no packed kind %q", p.Kind)
}

// assemble turns a stats answer (block partials, bucket table) into Stats.
func assemble(rows, cols, bins int, out [][]byte, meta *kernels.BandMeta, r wire.Response) (*kernels.Stats, error) {
	if len(out) != 2 || len(out[0])%wire.StatsPartial != 0 || len(out[1]) != 8*wire.StatsBuckets {
		return nil, fmt.Errorf("cuda: stats response %d: parts %v are not block partials and %d buckets", r.ID, r.Parts, wire.StatsBuckets)
	}
	parts, atEnd := decodePartials(out[0])
	hist := new([wire.StatsBuckets]uint64)
	for i := range hist {
		hist[i] = binary.LittleEndian.Uint64(out[1][8*i:])
	}
	meta.AtMax = atEnd
	return cpu.Assemble(rows, cols, bins, parts, hist, meta), nil
}

// decodePartials reads the kernels' block partials (wire.StatsPartial
// bytes each: n, NaN, inf, codes at an end, mean, M2, min, max).
func decodePartials(b []byte) (parts []cpu.Part, atEnd int64) {
	u := func(k int) uint64 { return binary.LittleEndian.Uint64(b[8*k:]) }
	f := func(k int) float64 { return math.Float64frombits(u(k)) }
	for k := 0; 8*k < len(b); k += 8 {
		parts = append(parts, cpu.Part{N: int64(u(k)), NaN: int64(u(k + 1)), Inf: int64(u(k + 2)),
			Mean: f(k + 4), M2: f(k + 5), Min: float32(f(k + 6)), Max: float32(f(k + 7))})
		atEnd += int64(u(k + 3))
	}
	return parts, atEnd
}
