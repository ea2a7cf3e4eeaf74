package main

import (
	"fmt"
	"slices"
)

// modelRows prints the W4A GEMM against the float32 GEMM of the same shape
// (kernels/cpu's BenchmarkLinearF32, BenchmarkW4AFP8, BenchmarkW4ANVFP4 when
// measured; median GFLOP/s of the runs, the ratio of the medians) and the
// decoder's tokens/s and peak heap (model's BenchmarkForward,
// BenchmarkForward1BShape).
func modelRows(res map[string]*series, median func([]float64) float64) {
	shapes := []string{"T=16/K=2048/N=2048", "T=128/K=2048/N=2048"}
	ref := func(sh string) float64 {
		if s := res["BenchmarkLinearF32/"+sh]; s != nil {
			return median(s.gflops)
		}
		return 0
	}
	if ref(shapes[0]) == 0 && ref(shapes[1]) == 0 {
		return
	}
	fmt.Printf("\n| linear, 2048 → 2048 (CPU, all cores) | T=16 tokens | T=128 tokens |\n|---|---|---|\n")
	for _, r := range []struct{ label, bench string }{
		{"float32 GEMM (kernels/cpu's own blocked GEMM; reference)", "BenchmarkLinearF32"},
		{"W4A-FP8 (GPTQ INT4 weights × E4M3 activations)", "BenchmarkW4AFP8"},
		{"W4A-NVFP4 (GPTQ INT4 weights × NVFP4 activations)", "BenchmarkW4ANVFP4"},
	} {
		cells := ""
		any := false
		for _, sh := range shapes {
			s := res[r.bench+"/"+sh]
			if s == nil || len(s.gflops) == 0 {
				cells += " not measured |"
				continue
			}
			any = true
			g := median(s.gflops)
			if r.bench == "BenchmarkLinearF32" || ref(sh) == 0 {
				cells += fmt.Sprintf(" %.1f GFLOP/s |", g)
			} else {
				cells += fmt.Sprintf(" %.1f GFLOP/s (%.2f× float32) |", g, g/ref(sh))
			}
		}
		if any {
			fmt.Printf("| %s |%s\n", r.label, cells)
		}
	}
	rows := []struct{ label, bench string }{
		{"test Llama (2 layers, hidden 256), BF16, 64 tokens", "BenchmarkForward/bf16"},
		{"test Llama, GPTQ dequantized to float32, 64 tokens", "BenchmarkForward/gptq-dense"},
		{"test Llama, GPTQ with W4A-FP8, 64 tokens", "BenchmarkForward/gptq-w4a-fp8"},
		{"Llama-3.2-1B shape (sparse), BF16, 16 tokens", "BenchmarkForward1BShape/bf16-none"},
		{"Llama-3.2-1B shape (sparse), GPTQ with W4A-FP8, 16 tokens", "BenchmarkForward1BShape/gptq-fp8"},
	}
	header := false
	for _, r := range rows {
		s := res[r.bench]
		if s == nil || len(s.tokens) == 0 {
			continue
		}
		if !header {
			fmt.Printf("\n| decoder forward (prefill, weights streamed layer by layer) | tokens/s | peak heap |\n|---|---|---|\n")
			header = true
		}
		peak := "not measured"
		if len(s.peakMiB) > 0 {
			peak = fmt.Sprintf("%.1f MiB", slices.Max(s.peakMiB))
		}
		fmt.Printf("| %s | %.3g | %s |\n", r.label, median(s.tokens), peak)
	}
}
