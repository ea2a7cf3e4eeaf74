package cpu

import (
	"context"
	"math"
	"sort"
	"sync"

	"github.com/quantscope/quantscope/kernels"
)

// Stats computes a module's statistics in one streamed pass over its bands
// (the working set of Dequantize, plus one 512 KiB bucket table a worker).
//
// Moments: each band's count, mean and sum of squared deviations (shifted
// by the band's first value, one pass while it is in cache), merged into the
// module's totals in row order (whichever worker finished first), with Chan, Golub
// and LeVeque's pairwise update, so no sum of squares of the whole module is
// ever formed and the result does not depend on which worker took which
// band (the page's companion and the command line agree to the last bit).
//
// Histogram: one pass with no range known in advance. Every value is counted
// in the bucket of its top 16 bits (sign, exponent and 7 mantissa bits: the
// bfloat16 it truncates to), exact and mergeable; at the end whole buckets
// are summed into bins whose edges are bfloat16 values nearest to equal
// widths over [min, max], so the counts are exact for the edges reported
// (see kernels.Stats.Histogram for the rule at an edge).
func (b *Backend) Stats(ctx context.Context, src kernels.RowSource, opt kernels.StatsOptions) (*kernels.Stats, error) {
	accs := make([]*acc, b.workers())
	for i := range accs {
		accs[i] = newAcc(!opt.Moments)
	}
	// Each band's moments wait here (keyed by its first row) for their turn,
	// merged in row order so that the result does not depend on which
	// worker finished first. With an ordered sink, at most the bands in
	// flight wait; without one no band is held back, and the moments of the
	// bands done ahead of a stalled one wait instead: about 100 bytes (56
	// and a map entry) a band, so at most 1/5000 of the module's output at
	// the default 512 KiB bands (1 MiB for 4 GiB, if the first band stalled
	// to the end).
	var mu sync.Mutex
	pending := map[int]moments{}
	nextLo := 0
	total := newMoments()
	var sink func(*kernels.Band) error
	if opt.Sink != nil {
		sink = func(band *kernels.Band) error {
			mu.Lock()
			bm := pending[band.Lo]
			delete(pending, band.Lo)
			mu.Unlock()
			total.merge(bm)
			return opt.Sink(band)
		}
	}
	err := b.stream(ctx, src, opt.ChunkBytes, !opt.Moments, opt.Progress, func(w int, band *kernels.Band) error {
		bm := newMoments()
		bm.rows = band.Hi - band.Lo
		bm.addMoments(band.Values)
		mu.Lock()
		pending[band.Lo] = bm
		if sink == nil {
			// merge the prefix this band completes, under the lock
			for {
				next, ok := pending[nextLo]
				if !ok {
					break
				}
				delete(pending, nextLo)
				total.merge(next)
				nextLo += next.rows
			}
		}
		mu.Unlock()
		if !opt.Moments {
			accs[w].addBuckets(band.Values)
			accs[w].addMeta(&band.Meta)
		}
		if opt.Each != nil {
			return opt.Each(w, band)
		}
		return nil
	}, sink)
	if err != nil {
		return nil, err
	}
	a := accs[0]
	for _, o := range accs[1:] {
		a.merge(o)
	}
	a.moments = total
	rows, cols := src.Shape()
	bins := opt.Bins
	if bins <= 0 {
		bins = 64
	}
	return a.result(rows, cols, bins, opt.Moments), nil
}

const (
	scaleExpMin = -160 // below float32's smallest subnormal exponent (-149)
	scaleExpN   = 300
)

// moments are a part's count, mean and sum of squared deviations of its
// finite values, their extremes, and its NaN and ±inf counts.
type moments struct {
	rows     int // the band's rows, while it waits for its turn
	n        int64
	mean, m2 float64
	min, max float32
	nan, inf int64
}

func newMoments() moments {
	return moments{min: float32(math.Inf(1)), max: float32(math.Inf(-1))}
}

// merge adds another part's moments (Chan et al.'s update for the mean and
// M2).
func (a *moments) merge(o moments) {
	a.mergeMoments(o.n, o.mean, o.m2)
	a.min, a.max = min(a.min, o.min), max(a.max, o.max)
	a.nan += o.nan
	a.inf += o.inf
}

// acc accumulates the statistics: the moments (merged in row order by
// Stats) and one worker's share of the buckets and band metadata.
type acc struct {
	moments
	hist      *[1 << 16]uint64 // buckets by the top 16 bits (nil for moments only)
	scaleExp  [scaleExpN]int64
	scales    int64
	scaleZero int64
	meta      kernels.BandMeta // summed counts (Scales unused)
}

func newAcc(buckets bool) *acc {
	a := &acc{moments: newMoments()}
	if buckets {
		a.hist = new([1 << 16]uint64)
	}
	return a
}

const expMask = 0x7F800000

// addBuckets counts a band's values in the buckets of their top 16 bits.
func (a *acc) addBuckets(v []float32) {
	hist := a.hist
	for _, x := range v {
		hist[math.Float32bits(x)>>16]++
	}
}

// addMoments adds one band in one pass: the extremes and the sums of
// d = x − K and d² with K the worker's mean so far (the band's first value
// for its first band), in sixteen lanes (moments.go; AVX-512 where the CPU
// has it). With K near the mean the shifted sums lose nothing to
// cancellation (M2 = Σd² − (Σd)²/n, relative error about
// ε·(1 + (mean−K)²/σ²)); bands merge by Chan et al.'s update. A band holding
// NaN or ±inf takes the careful two-pass loop instead.
func (a *moments) addMoments(v []float32) {
	if len(v) == 0 {
		return
	}
	k := a.mean
	if a.n == 0 {
		k = float64(v[0])
	}
	n16 := len(v) &^ 15
	l := newLanes()
	l.addLanes(v[:n16], k)
	if l.nonFinite() {
		a.addCareful(v)
		return
	}
	t1, t2, lo, hi := l.sums()
	for _, x := range v[n16:] {
		if math.Float32bits(x)&expMask == expMask {
			a.addCareful(v)
			return
		}
		lo, hi = min(lo, x), max(hi, x)
		d := float64(x) - k
		t1 += d
		t2 += d * d
	}
	n := float64(len(v))
	a.min, a.max = min(a.min, lo), max(a.max, hi)
	a.mergeMoments(int64(len(v)), k+t1/n, max(t2-t1*t1/n, 0))
}

// addCareful is addMoments for a band with non-finite values.
func (a *moments) addCareful(v []float32) {
	var sum float64
	var n int64
	lo, hi := a.min, a.max
	for _, x := range v {
		u := math.Float32bits(x)
		if u&expMask == expMask {
			if u&0x7FFFFF != 0 {
				a.nan++
			} else {
				a.inf++
			}
			continue
		}
		lo, hi = min(lo, x), max(hi, x)
		sum += float64(x)
		n++
	}
	a.min, a.max = lo, hi
	if n == 0 {
		return
	}
	mean := sum / float64(n)
	var m2 float64
	for _, x := range v {
		if math.Float32bits(x)&expMask != expMask {
			d := float64(x) - mean
			m2 += d * d
		}
	}
	a.mergeMoments(n, mean, m2)
}

// mergeMoments is Chan et al.'s update of (n, mean, M2) with another part's.
func (a *moments) mergeMoments(n int64, mean, m2 float64) {
	if n == 0 {
		return
	}
	if a.n == 0 {
		a.n, a.mean, a.m2 = n, mean, m2
		return
	}
	t := a.n + n
	d := mean - a.mean
	a.mean += d * float64(n) / float64(t)
	a.m2 += m2 + d*d*float64(a.n)*float64(n)/float64(t)
	a.n = t
}

func (a *acc) addMeta(m *kernels.BandMeta) {
	a.meta.Codes += m.Codes
	a.meta.AtMax += m.AtMax
	a.meta.ScaleE4M3 += m.ScaleE4M3
	a.meta.ScaleAtMax += m.ScaleAtMax
	a.meta.ScaleSubnormal += m.ScaleSubnormal
	for _, s := range m.Scales {
		a.scales++
		f := math.Abs(float64(s))
		switch {
		case f == 0:
			a.scaleZero++
		case math.IsInf(f, 0) || f != f:
		default:
			_, e := math.Frexp(f) // f in [2^(e−1), 2^e)
			a.scaleExp[e-1-scaleExpMin]++
		}
	}
}

func (a *acc) merge(o *acc) {
	a.moments.merge(o.moments)
	if o.hist != nil {
		for i, c := range o.hist {
			a.hist[i] += c
		}
	}
	for i, c := range o.scaleExp {
		a.scaleExp[i] += c
	}
	a.scales += o.scales
	a.scaleZero += o.scaleZero
	a.addMeta(&o.meta)
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

func (a *acc) result(rows, cols, bins int, moments bool) *kernels.Stats {
	st := &kernels.Stats{Rows: rows, Cols: cols, Count: a.n, NaN: a.nan, Inf: a.inf,
		Min: math.NaN(), Max: math.NaN(), Mean: math.NaN(), Std: math.NaN(),
		Scales: a.scales, ScaleZero: a.scaleZero,
		Codes: a.meta.Codes, AtMax: a.meta.AtMax, AtMaxFraction: ratio(a.meta.AtMax, a.meta.Codes),
		ScaleE4M3: a.meta.ScaleE4M3, ScaleAtMax: a.meta.ScaleAtMax, ScaleSubnormal: a.meta.ScaleSubnormal,
		ScaleAtMaxFraction:     ratio(a.meta.ScaleAtMax, a.meta.ScaleE4M3),
		ScaleSubnormalFraction: ratio(a.meta.ScaleSubnormal, a.meta.ScaleE4M3),
	}
	st.Histogram = kernels.Histogram{Edges: []float64{}, Counts: []int64{}}
	if a.n > 0 {
		st.Min, st.Max = float64(a.min), float64(a.max)
		st.Mean, st.Std = a.mean, math.Sqrt(a.m2/float64(a.n))
		if !moments {
			st.Histogram = bucketHistogram(a.hist, st.Min, st.Max, a.n, bins)
		}
	}
	st.ScaleHistogram = kernels.Histogram{Edges: []float64{}, Counts: []int64{}}
	lo, hi := -1, -1
	for i, c := range a.scaleExp {
		if c > 0 {
			if lo < 0 {
				lo = i
			}
			hi = i
		}
	}
	if lo >= 0 {
		for i := lo; i <= hi+1; i++ {
			st.ScaleHistogram.Edges = append(st.ScaleHistogram.Edges, math.Ldexp(1, i+scaleExpMin))
		}
		for i := lo; i <= hi; i++ {
			st.ScaleHistogram.Counts = append(st.ScaleHistogram.Counts, a.scaleExp[i])
		}
	}
	return st
}

// bf16Edge rounds x to the nearest bfloat16 value (a bucket boundary).
func bf16Edge(x float64) float64 {
	u := math.Float32bits(float32(x))
	u = (u + 0x7FFF + (u>>16)&1) &^ 0xFFFF
	v := float64(math.Float32frombits(u))
	if v == 0 {
		return 0 // −0 → +0
	}
	return v
}

// bucketHistogram sums the buckets into about bins bins over [lo, hi].
func bucketHistogram(hist *[1 << 16]uint64, lo, hi float64, n int64, bins int) kernels.Histogram {
	if lo == hi {
		return kernels.Histogram{Edges: []float64{lo, hi}, Counts: []int64{n}}
	}
	edges := []float64{lo}
	for i := 1; i < bins; i++ {
		e := bf16Edge(lo + (hi-lo)*float64(i)/float64(bins))
		if e > edges[len(edges)-1] && e < hi {
			edges = append(edges, e)
		}
	}
	edges = append(edges, hi)
	nb := len(edges) - 1
	counts := make([]int64, nb)
	for k, c := range hist {
		if c == 0 || (k>>7)&0xFF == 0xFF { // empty, or NaN/inf
			continue
		}
		var i int
		if k&0x8000 == 0 || k == 0x8000 { // positive or ±0: bucket [b_k, b_k+1)
			v := float64(math.Float32frombits(uint32(k&0x7FFF) << 16))
			i = sort.Search(nb+1, func(j int) bool { return edges[j] > v }) - 1
		} else { // negative: bucket (−b_k+1, −b_k]
			v := -float64(math.Float32frombits(uint32(k&0x7FFF) << 16))
			i = sort.Search(nb, func(j int) bool { return edges[j+1] >= v })
		}
		counts[min(max(i, 0), nb-1)] += int64(c)
	}
	return kernels.Histogram{Edges: edges, Counts: counts}
}
