// Command table turns `go test -bench` output into the README's speed table:
// each decoder's output bandwidth as a ratio of a memmove of the same output
// size measured in the same run (the best of the -count repetitions of each,
// which is the least disturbed on a noisy machine), and the header parse time.
//
//	go test -run '^$' -bench . -count 5 ./formats/... | go run ./bench/table
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

type best struct {
	mbps, nsop float64
	seen       bool
}

func main() {
	res := map[string]*best{}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if i := strings.LastIndex(name, "-"); i > 0 {
			name = name[:i]
		}
		b := res[name]
		if b == nil {
			b = &best{}
			res[name] = b
		}
		for i := 2; i+1 < len(f); i++ {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "MB/s":
				if v > b.mbps {
					b.mbps = v
				}
			case "ns/op":
				if !b.seen || v < b.nsop {
					b.nsop = v
				}
				b.seen = true
			}
		}
	}
	mem := res["BenchmarkMemmoveF32"]
	if mem == nil || mem.mbps == 0 {
		fmt.Fprintln(os.Stderr, "table: no BenchmarkMemmoveF32 in the input")
		os.Exit(1)
	}
	fmt.Printf("| measurement | result | target | met |\n|---|---|---|---|\n")
	fmt.Printf("| memmove, float32 output (reference) | %.1f GB/s | | |\n", mem.mbps/1000)
	ratio := func(bench, label string, target float64) {
		b := res[bench]
		if b == nil {
			fmt.Printf("| %s | not measured | ≥ %.0f%% | no |\n", label, 100*target)
			return
		}
		r := b.mbps / mem.mbps
		fmt.Printf("| %s | %.1f GB/s = %.0f%% of memmove | ≥ %.0f%% | %s |\n", label, b.mbps/1000, 100*r, 100*target, yes(r >= target))
	}
	ratio("BenchmarkDecodeE4M3", "FP8 e4m3 → f32 (256-entry table)", 0.60)
	ratio("BenchmarkDecodeE2M1Blocks16", "E2M1 + block-16 scales → f32 (NVFP4)", 0.50)
	ratio("BenchmarkDecodeE2M1", "E2M1 → f32 (pair table)", 0)
	ratio("BenchmarkDecodeBF16", "BF16 → f32", 0)
	if p := res["BenchmarkParseDeepSeekShard"]; p != nil {
		ms := p.nsop / 1e6
		fmt.Printf("| parse a 2,300-tensor header (one DeepSeek-R1-FP4 shard) | %.2f ms | < 5 ms | %s |\n", ms, yes(ms < 5))
	}
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}
