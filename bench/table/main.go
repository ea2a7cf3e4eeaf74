// Command table turns `go test -bench` output into the README's speed table.
// The decoder ratios come from the paired benchmarks (BenchmarkRatio*), which
// time a decoder and a memmove of the same output size in alternation; with
// -count N the median of the N ratios is shown. Plain throughputs are the
// best of the N runs.
//
//	go test -run '^$' -bench . -count 5 ./formats/... ./kernels/... | go run ./bench/table
package main

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

type series struct {
	mbps, nsop, ratio []float64
	scaling           []float64 // two workers against one, in alternation
	refScaling        []float64 // the same for a pure compute loop of the same duration
	evals             []float64 // the mse sweep's candidate evaluations per second
	gflops, tokens    []float64 // GEMM GFLOP/s; decoder tokens/s
	peakMiB           []float64 // a forward's peak heap
}

func main() {
	res := map[string]*series{}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if i := strings.LastIndex(name, "-"); i > 0 {
			name = name[:i]
		}
		s := res[name]
		if s == nil {
			s = &series{}
			res[name] = s
		}
		for i := 2; i+1 < len(f); i++ {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "MB/s":
				s.mbps = append(s.mbps, v)
			case "ns/op":
				s.nsop = append(s.nsop, v)
			case "%memmove":
				s.ratio = append(s.ratio, v)
			case "x2/1":
				s.scaling = append(s.scaling, v)
			case "ref-x2/1":
				s.refScaling = append(s.refScaling, v)
			case "evals/s":
				s.evals = append(s.evals, v)
			case "GFLOP/s":
				s.gflops = append(s.gflops, v)
			case "tokens/s":
				s.tokens = append(s.tokens, v)
			case "peak-heap-MiB":
				s.peakMiB = append(s.peakMiB, v)
			}
		}
	}
	median := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	best := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		return slices.Max(v)
	}
	fmt.Printf("| measurement | 4 MiB output (in cache) | 64 MiB output (a whole layer) | target | met |\n|---|---|---|---|---|\n")
	row := func(label, bench string, target float64) {
		a, b := res[bench+"/out=4MiB"], res[bench+"/out=64MiB"]
		if a == nil || b == nil {
			fmt.Printf("| %s | not measured | not measured | | |\n", label)
			return
		}
		ra, rb := median(a.ratio), median(b.ratio)
		met := ""
		if target > 0 {
			met = fmt.Sprintf("%s (whole layer), %s (in cache)", yes(rb >= target), yes(ra >= target))
		}
		tgt := ""
		if target > 0 {
			tgt = fmt.Sprintf("≥ %.0f%%", target)
		}
		fmt.Printf("| %s | %.0f%% of memmove | %.0f%% of memmove | %s | %s |\n", label, ra, rb, tgt, met)
	}
	row("FP8 e4m3 → f32 (256-entry table)", "BenchmarkRatioE4M3", 60)
	row("E2M1 + block-16 scales → f32 (NVFP4)", "BenchmarkRatioE2M1Blocks16", 50)
	thr := func(label, bench string) {
		a, b := res[bench+"/out=4MiB"], res[bench+"/out=64MiB"]
		if a == nil || b == nil {
			return
		}
		fmt.Printf("| %s | %.1f GB/s | %.1f GB/s | | |\n", label, best(a.mbps)/1000, best(b.mbps)/1000)
	}
	thr("memmove, float32 output (reference)", "BenchmarkMemmoveF32")
	thr("FP8 e4m3 → f32", "BenchmarkDecodeE4M3")
	thr("E2M1 → f32 (pair table)", "BenchmarkDecodeE2M1")
	thr("E2M1 + block-16 scales → f32", "BenchmarkDecodeE2M1Blocks16")
	thr("BF16 → f32", "BenchmarkDecodeBF16")
	quantizeRows(res, median, yes)
	if p := res["BenchmarkParseDeepSeekShard"]; p != nil && len(p.nsop) > 0 {
		ms := slices.Min(p.nsop) / 1e6
		fmt.Printf("| parse a 2,300-tensor header (one DeepSeek-R1-FP4 shard) | %.2f ms | | < 5 ms | %s |\n", ms, yes(ms < 5))
	}
	// Whole modules through the streamed pipeline (kernels/cpu), 1 and 2
	// workers, and two workers against one timed in alternation.
	// The scaling is shown for the stream's two ways out: "each" (bands in
	// any order: decode --out, stats) and "ordered" (a sink in row order).
	mod := func(label, bench string) {
		a, b := res[bench+"/workers=1"], res[bench+"/workers=2"]
		if a == nil || b == nil {
			return
		}
		r1, r2 := median(a.ratio), median(b.ratio)
		var cells, met []string
		for _, mode := range []string{"each", "ordered"} {
			s64, s256 := res[bench+"/scaling/"+mode+"/out=64MiB"], res[bench+"/scaling/"+mode+"/out=256MiB"]
			if s64 == nil || s256 == nil {
				continue
			}
			x64, x256 := median(s64.scaling), median(s256.scaling)
			cells = append(cells, fmt.Sprintf("%s: %.2f× (64 MiB), %.2f× (256 MiB); compute reference %.2f×, %.2f×",
				mode, x64, x256, median(s64.refScaling), median(s256.refScaling)))
			met = append(met, fmt.Sprintf("%s %s (64 MiB), %s (256 MiB)", mode, yes(x64 >= 1.7), yes(x256 >= 1.7)))
		}
		if len(cells) == 0 {
			return
		}
		fmt.Printf("| %s | %.0f%% of memmove | %.0f%% of memmove | %s | ≥ 50%%, ≥ 1.7× | %s; %s |\n",
			label, r1, r2, strings.Join(cells, "; "), yes(r1 >= 50), strings.Join(met, "; "))
	}
	if res["BenchmarkRatioModuleNVFP4/workers=1"] != nil || res["BenchmarkRatioModuleFP8Block/workers=1"] != nil {
		fmt.Printf("\n| module dequantization, streamed (2048×8192, 64 MiB out) | 1 core | 2 cores | 2 cores / 1 core, in alternation | target | met |\n|---|---|---|---|---|---|\n")
		mod("NVFP4 (ModelOpt)", "BenchmarkRatioModuleNVFP4")
		mod("FP8 128×128 blocks (DeepSeek)", "BenchmarkRatioModuleFP8Block")
	}
	modelRows(res, median)
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}
