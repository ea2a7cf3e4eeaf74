package main

import "fmt"

// quantizeRows adds the kernels/cpu rows: NVFP4 max-recipe quantize as a
// share of a memmove of its float32 input (target ≥ 25%), and the mse
// sweep's candidate evaluations per second against ModelOpt's Triton kernel
// on a B300 (8192×4096/16 blocks × 126 candidates in 4.23 ms ≈ 6.2e10/s).
func quantizeRows(res map[string]*series, median func([]float64) float64, yes func(bool) string) {
	for _, cores := range []int{1, 2} {
		a := res[fmt.Sprintf("BenchmarkRatioQuantizeNVFP4Max/cores=%d/in=4MiB", cores)]
		b := res[fmt.Sprintf("BenchmarkRatioQuantizeNVFP4Max/cores=%d/in=64MiB", cores)]
		if a == nil || b == nil {
			continue
		}
		ra, rb := median(a.ratio), median(b.ratio)
		fmt.Printf("| NVFP4 max-recipe quantize, f32 in, %d core(s) | %.0f%% of memmove | %.0f%% of memmove | ≥ 25%% | %s (whole layer), %s (in cache) |\n",
			cores, ra, rb, yes(rb >= 25), yes(ra >= 25))
	}
	const modelOpt = 126.0 * 8192 * 4096 / 16 / 4.23e-3
	for _, cores := range []int{1, 2} {
		s := res[fmt.Sprintf("BenchmarkMSESweep/cores=%d", cores)]
		if s == nil || len(s.evals) == 0 {
			continue
		}
		e := median(s.evals)
		fmt.Printf("| NVFP4 mse sweep (126 E4M3 scales a block), %d core(s) | %.2g evaluations/s | %.0f ms for 8192×4096 | ModelOpt on a B300: %.2g/s (%.0f× faster) | |\n",
			cores, e, 1e3*126*8192*4096/16/e, modelOpt, modelOpt/e)
	}
}
