package ptx

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/kernels/cuda"
)

// dequant_int.cu compiled for the CPU (testdata/host_int.cpp) against the
// client's CPU decoder (formats/packing's unpackers and formats/scheme's
// formulas, which kernels/cuda's tests tie to formats/scheme itself).

func hostIntKernels(t *testing.T) string {
	return buildHost(t, "host_int", "c++17", []string{"dequant_int.cu"})
}

// intCase builds a random integer weight: codes over the whole range,
// scales over many binades (one NaN and one inf when wild), zero points
// when zeros, a shuffled g_idx when descAct.
func intCase(layout cuda.IntLayout, bits, rows, cols, group int, zeros, descAct, wild bool, seed uint64) *cuda.IntWeight {
	r := rand.New(rand.NewPCG(seed, uint64(bits)))
	groups := (cols + group - 1) / group
	w := &cuda.IntWeight{Layout: layout, Bits: bits, Rows: rows, Cols: cols, GroupSize: group, Scales: make([]float32, rows*groups)}
	for i := range w.Scales {
		w.Scales[i] = float32(math.Ldexp(r.Float64()+0.5, r.IntN(60)-40))
		if r.IntN(10) == 0 {
			w.Scales[i] = -w.Scales[i]
		}
	}
	if wild {
		w.Scales[1] = float32(math.NaN())
		w.Scales[len(w.Scales)-1] = float32(math.Inf(1))
	}
	var err error
	switch layout {
	case cuda.CTBitstream, cuda.CTPerWord:
		codes := make([]int8, rows*cols)
		for i := range codes {
			codes[i] = int8(r.IntN(1<<bits) - 1<<(bits-1))
		}
		l := packing.CTBitstream
		if layout == cuda.CTPerWord {
			l = packing.CTPerWord
		}
		w.Packed, err = packing.PackCT(codes, rows, cols, bits, l)
		if zeros {
			w.Zeros = make([]float32, len(w.Scales))
			for i := range w.Zeros {
				w.Zeros[i] = float32(r.IntN(1<<bits) - 1<<(bits-1))
			}
		}
	default: // stored [in, out] = [cols, rows]
		codes := make([]uint8, rows*cols)
		for i := range codes {
			codes[i] = uint8(r.IntN(1 << bits))
		}
		if layout == cuda.GPTQ {
			w.Packed, err = packing.PackGPTQWeight(codes, cols, rows, bits)
		} else {
			w.Packed, err = packing.PackAWQ(codes, cols, rows)
		}
		if zeros {
			w.Zeros = make([]float32, len(w.Scales))
			for i := range w.Zeros {
				w.Zeros[i] = float32(r.IntN(1<<bits) + r.IntN(2)) // GPTQ v1's z − 1 + 1 reaches 2^b
			}
		}
	}
	if err != nil {
		panic(err)
	}
	if descAct {
		w.GIdx = make([]int32, cols)
		for i := range w.GIdx {
			w.GIdx[i] = int32(min(i/group, groups-1))
		}
		r.Shuffle(cols, func(i, j int) { w.GIdx[i], w.GIdx[j] = w.GIdx[j], w.GIdx[i] })
	}
	return w
}

// intInput is host_int's stdin and arguments for w: the client's parts.
func intInput(t *testing.T, w *cuda.IntWeight) (in []byte, groups int) {
	t.Helper()
	groups = len(w.Scales) / w.Rows
	z := w.Zeros
	if z == nil {
		mid := float32(0)
		switch w.Layout {
		case cuda.GPTQ:
			mid = float32(int(1) << (w.Bits - 1))
		case cuda.AWQ:
			mid = 8
		}
		z = make([]float32, len(w.Scales))
		for i := range z {
			z[i] = mid
		}
	}
	gi := make([]byte, 4*w.Cols)
	for i := range w.Cols {
		g := min(i/w.GroupSize, groups-1)
		if w.GIdx != nil {
			g = int(w.GIdx[i])
		}
		binary.LittleEndian.PutUint32(gi[4*i:], uint32(g))
	}
	in = append(append(append(append([]byte{}, w.Packed...), f32b(w.Scales)...), f32b(z)...), gi...)
	return in, groups
}

func intCases() []*cuda.IntWeight {
	var cs []*cuda.IntWeight
	for bits := 1; bits <= 8; bits++ {
		for _, l := range []cuda.IntLayout{cuda.CTBitstream, cuda.CTPerWord} {
			cs = append(cs, intCase(l, bits, 37, 300, 64, bits%2 == 0, bits == 3, bits == 5, uint64(bits)))
		}
	}
	for _, bits := range []int{2, 3, 4, 8} {
		cs = append(cs, intCase(cuda.GPTQ, bits, 48, 256, 32, true, false, false, 10+uint64(bits)),
			intCase(cuda.GPTQ, bits, 40, 384, 128, bits != 8, true, bits == 3, 20+uint64(bits)))
	}
	return append(cs, intCase(cuda.AWQ, 4, 64, 256, 128, true, false, false, 30),
		intCase(cuda.AWQ, 4, 24, 512, 64, false, false, true, 31))
}

func TestHostKernelsDequantInt(t *testing.T) {
	bin := hostIntKernels(t)
	for _, w := range intCases() {
		what := fmt.Sprintf("layout %d, %d bits, [%d, %d], zeros %v, g_idx %v", w.Layout, w.Bits, w.Rows, w.Cols, w.Zeros != nil, w.GIdx != nil)
		want, err := cuda.DequantIntCPU(w)
		if err != nil {
			t.Fatal(what, err)
		}
		in, groups := intInput(t, w)
		got := runHost(t, bin, in, "dequant_int", fmt.Sprint(int(w.Layout)), fmt.Sprint(w.Bits), fmt.Sprint(w.Rows), fmt.Sprint(w.Cols), fmt.Sprint(groups), fmt.Sprint(len(w.Packed)/4))
		sameBits(t, what, got, want)
	}
}
