package fit

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// GPU is one accelerator's memory.
type GPU struct {
	Name        string `json:"name"`
	MemoryBytes uint64 `json:"memory_bytes"`
}

// GB is a vendor's gigabyte: 10^9 bytes.
const GB = 1_000_000_000

// Catalog is the GPUs a verdict lists by default, with the memory their
// vendors state, in decimal GB. Drivers report a little more (an H100 80 GB
// shows 81,559 MiB, 85.5 GB), so verdicts err on the safe side.
var Catalog = []GPU{
	{"H100", 80 * GB},
	{"H200", 141 * GB},
	{"B200", 192 * GB},
	{"L40S", 48 * GB},
	{"RTX 4090", 24 * GB},
	{"RTX 5090", 32 * GB},
}

func squash(s string) string {
	return strings.ToLower(strings.NewReplacer(" ", "", "-", "", "_", "").Replace(s))
}

// ParseGPU reads a --gpu value: a catalog name (case, spaces and dashes
// ignored: "h100", "rtx-4090", "4090"), or NAME:SIZE with the memory in
// decimal GB ("A100:80", "MI300X:192GB") or binary GiB ("A100:80GiB", as
// nvidia-smi's MiB add up).
func ParseGPU(spec string) (GPU, error) {
	name, size, custom := strings.Cut(spec, ":")
	name = strings.TrimSpace(name)
	if custom {
		v, unit := sizeUnit(size)
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || !(n > 0) || n > 1e6 || name == "" {
			return GPU{}, fmt.Errorf("--gpu %q: want NAME:GB with a positive size in GB (decimal, as vendors state it) or GiB, e.g. A100:80 or A100:80GiB", spec)
		}
		return GPU{Name: name, MemoryBytes: uint64(math.Round(n * unit))}, nil
	}
	for _, g := range Catalog {
		if q := squash(name); q == squash(g.Name) || "rtx"+q == squash(g.Name) {
			return g, nil
		}
	}
	names := make([]string, len(Catalog))
	for i, g := range Catalog {
		names[i] = g.Name
	}
	return GPU{}, fmt.Errorf("--gpu %q: not in the catalog (%s); give its memory as NAME:GB", spec, strings.Join(names, ", "))
}

// sizeUnit splits a size into its number and the bytes of its unit: GB
// (and no unit) 10^9, GiB 2^30, in any case.
func sizeUnit(s string) (number string, unit float64) {
	t := strings.TrimSpace(s)
	switch l := strings.ToLower(t); {
	case strings.HasSuffix(l, "gib"):
		return strings.TrimSpace(t[:len(t)-3]), 1 << 30
	case strings.HasSuffix(l, "gb"):
		return strings.TrimSpace(t[:len(t)-2]), GB
	}
	return t, GB
}

// DefaultReserve is the share of each GPU held back for activations, CUDA
// graphs and workspace: what vLLM's default gpu_memory_utilization 0.9
// leaves.
const DefaultReserve = 0.10

// ParseReserve reads a --reserve value: a fraction of each GPU below 1
// ("0.1"), a percentage ("10%"), or decimal GB a GPU ("6GB"; "6GiB" binary). A bare number
// is a fraction only: "1" or "1.5" is refused rather than read as GB, which
// a fraction's reader would not expect.
func ParseReserve(s string) (fraction float64, bytes uint64, err error) {
	t := strings.TrimSpace(s)
	bad := fmt.Errorf("--reserve %q: want a fraction of each GPU below 1 (0.1), a percentage (10%%) or GB a GPU (6GB)", s)
	if p, ok := strings.CutSuffix(t, "%"); ok {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v < 0 || v >= 100 {
			return 0, 0, bad
		}
		return v / 100, 0, nil
	}
	num, unit := sizeUnit(t)
	hasUnit := num != t
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || v > 1e6 {
		return 0, 0, bad
	}
	if hasUnit {
		return 0, uint64(math.Round(v * unit)), nil
	}
	if v >= 1 {
		return 0, 0, fmt.Errorf("--reserve %q: a bare number is a fraction of each GPU, below 1; write %sGB for a size, or a percentage (10%%)", s, t)
	}
	return v, 0, nil
}
