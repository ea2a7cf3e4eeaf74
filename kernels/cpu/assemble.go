package cpu

import "github.com/quantscope/quantscope/kernels"

// Part is a share of a module's values counted elsewhere (a CUDA thread
// block's partial): its finite values' count, mean, sum of squared
// deviations from that mean and extremes, and its NaN and ±inf counts.
type Part struct {
	N, NaN, Inf int64
	Mean, M2    float64
	Min, Max    float32
}

// Assemble builds a module's Stats as Stats does from its own passes: the
// parts merged in the order given (Chan et al.'s update), hist the count of
// every value by its top 16 bits (the buckets of Stats' histogram, bins
// made by the same code), meta the band information of the whole module
// (codes, codes at the maximum, every real scale once, E4M3 scale counts).
func Assemble(rows, cols, bins int, parts []Part, hist *[1 << 16]uint64, meta *kernels.BandMeta) *kernels.Stats {
	a := newAcc(false)
	a.hist = hist
	for _, p := range parts {
		a.mergeMoments(p.N, p.Mean, p.M2)
		if p.N > 0 {
			a.min, a.max = min(a.min, p.Min), max(a.max, p.Max)
		}
		a.nan += p.NaN
		a.inf += p.Inf
	}
	a.addMeta(meta)
	if bins <= 0 {
		bins = 64
	}
	return a.result(rows, cols, bins, false)
}
