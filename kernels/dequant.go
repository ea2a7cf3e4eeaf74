package kernels

import "context"

// Dequantizer is the family of full-module dequantization and statistics
// operations. A module reaches it as a RowSource: something that decodes
// bands of its logical [rows, cols] weight on request (formats/scheme does
// it over a checkpoint; kernels never sees files).
type Dequantizer interface {
	// Dequantize decodes every row of src, in bands of rows decoded on the
	// backend's workers, and hands the bands to sink one at a time in row
	// order (with a nil sink, opt.Each alone sees them, in any order). A
	// band's values are valid only during the sink call (the buffer is
	// reused). The working set is bounded independently of the module's
	// size (each backend states its bound). ctx is checked between bands;
	// opt.Progress is told the rows done after each band (with a nil sink,
	// the rows of all bands done so far, not a prefix).
	Dequantize(ctx context.Context, src RowSource, opt DequantOptions, sink func(b *Band) error) error
	// Stats computes a module's statistics in one streamed pass.
	Stats(ctx context.Context, src RowSource, opt StatsOptions) (*Stats, error)
}

// RowSource is a matrix stored in some encoded form, decoded on demand.
type RowSource interface {
	// Shape is the logical [rows, cols] of the decoded matrix.
	Shape() (rows, cols int)
	// NewDecoder returns a decoder for one worker: it may keep scratch
	// buffers, and is used by one goroutine at a time. Decoders of the same
	// source run concurrently on distinct bands.
	NewDecoder() RowDecoder
}

// RowDecoder decodes bands of a RowSource.
type RowDecoder interface {
	// Decode writes rows [lo, hi) into dst, (hi−lo)·cols values row-major.
	// When meta is not nil it also fills in what the stored form says of
	// those rows (codes at the format's maximum, the scales).
	Decode(dst []float32, lo, hi int, meta *BandMeta) error
}

// Releaser is a RowDecoder that can hand its scratch buffers on once its
// worker is done with it (the next stream's decoders then fault in no fresh
// pages). A backend calls Release once, after the decoder's last Decode.
type Releaser interface {
	Release()
}

// Release releases d when it is a Releaser.
func Release(d RowDecoder) {
	if r, ok := d.(Releaser); ok {
		r.Release()
	}
}

// BandMeta is what a band's stored form tells beyond its values.
type BandMeta struct {
	// Codes is how many stored codes the band holds (0 when the weight is
	// not stored as codes, e.g. BF16), AtMax how many of them are at the
	// format's largest magnitude (|e2m1| = 6, |e4m3| = 448, an int code at
	// either end of its range), before scaling.
	Codes, AtMax int64
	// Scales are the real scale values (multipliers: E8M0 decoded, NVFP4
	// block scale × global, FP8 block/row/tensor scales, int group scales)
	// that this band owns: each scale is reported by exactly one band, the
	// one holding the first row it applies to. The decoder appends to it.
	Scales []float32
	// ScaleE4M3 counts the band's scales stored as E4M3 codes (NVFP4 block
	// scales); of those, ScaleAtMax are the code of 448 and ScaleSubnormal
	// are in E4M3's subnormal range (exponent field 0, mantissa not 0).
	ScaleE4M3, ScaleAtMax, ScaleSubnormal int64
}

// Reset empties m for the next band, keeping its Scales buffer.
func (m *BandMeta) Reset() { *m = BandMeta{Scales: m.Scales[:0]} }

// Band is rows [Lo, Hi) of a decoded matrix.
type Band struct {
	Lo, Hi int
	Cols   int
	Values []float32 // (Hi−Lo)·Cols values, row-major
	Meta   BandMeta  // filled in when DequantOptions.WantMeta
	// Aux is the caller's buffer, kept with the band and reused (see
	// DequantOptions.Each).
	Aux []byte
}

// DequantOptions tunes a streamed dequantization.
type DequantOptions struct {
	// ChunkBytes is the target size of a band's float32 output (default
	// DefaultChunkBytes); a band holds at least one row.
	ChunkBytes int
	// Progress is told rows done out of rows total after each band (a
	// prefix with a sink; with none, the rows of every band done so far).
	Progress Progress
	// WantMeta asks the decoders for each band's BandMeta.
	WantMeta bool
	// Each, when set, runs on the worker that decoded a band, right after
	// decoding and before the band goes to the ordered sink: per-band work
	// that should use every core (formatting text into Band.Aux, say). With
	// a nil sink it is the only work, on bands in any order, and Progress
	// counts the rows of every band done, not a prefix.
	Each func(worker int, b *Band) error
}

// DefaultChunkBytes is the default output size of one band: large enough
// for large writes and few ctx checks, small enough that a band and its
// stored bytes stay in a core's L2 (1 MiB on Zen 4/5, 1-2 MiB on recent
// Xeons) between the decode and the statistics pass. On a 2-core Zen VM
// 512 KiB bands decoded NVFP4 at 77-80% of memmove by CPU time against
// 47-54% with 2 MiB bands (FP8 blocks: within the noise).
const DefaultChunkBytes = 512 << 10

// BandRows is how many rows of cols values make a band of about chunkBytes.
func BandRows(cols, chunkBytes int) int {
	if chunkBytes <= 0 {
		chunkBytes = DefaultChunkBytes
	}
	return max(1, chunkBytes/(4*max(cols, 1)))
}

// StatsOptions tunes Stats.
type StatsOptions struct {
	Bins       int // value histogram bins (default 64)
	ChunkBytes int
	Progress   Progress
	// Sink, when set, receives the counted bands in row order, as
	// Dequantize's sink does: decode and statistics in one pass.
	Sink func(b *Band) error
	// Each, when set, runs on the worker that counted a band, right after
	// counting, as DequantOptions.Each does (bands in any order, several at
	// once): decode --out writes each band at its own offset from there.
	Each func(worker int, b *Band) error
	// Moments asks only for Count, Min, Max, Mean, Std, NaN and Inf (what
	// decode prints): no histogram, no codes or scales asked of the decoders.
	Moments bool
}

// Stats describes a module's decoded values. Min, Max, Mean and Std are over
// the finite values (population std); NaN and Inf are counted apart.
type Stats struct {
	Rows, Cols int
	Count      int64 // finite values
	Min, Max   float64
	Mean, Std  float64
	NaN, Inf   int64
	// Histogram of the finite values. Its edges lie on bfloat16 values (the
	// streamed pass counts values by their top 16 bits, so that one pass
	// needs no range known in advance, and whole buckets are summed into
	// bins of nearly equal width over [Min, Max]); the counts are exact for
	// the edges given. A value on an interior edge is counted in the bin
	// farther from zero (buckets are closed at their end nearer zero), zero
	// in the bin above it; the outer bins include Min and Max.
	Histogram Histogram
	// ScaleHistogram counts the absolute values of the real scales on log2
	// bins (edges are powers of two, bin k holds [2^k, 2^(k+1))); zero
	// scales are in ScaleZero, not in the histogram.
	ScaleHistogram Histogram
	Scales         int64 // scales seen (including zeros)
	ScaleZero      int64
	// Codes and AtMax are summed from the bands (see BandMeta); AtMaxFraction
	// is AtMax/Codes, NaN when the weight is not stored as codes.
	Codes, AtMax  int64
	AtMaxFraction float64
	// ScaleE4M3 counts scales stored as E4M3; the fractions are of those
	// (NaN when there are none).
	ScaleE4M3                                  int64
	ScaleAtMaxFraction, ScaleSubnormalFraction float64
	ScaleAtMax, ScaleSubnormal                 int64
}

// Histogram is len(Counts) bins between len(Counts)+1 increasing edges.
type Histogram struct {
	Edges  []float64
	Counts []int64
}
