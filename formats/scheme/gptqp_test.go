package scheme

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
)

// A gptq_p module (GPT-QModel's planar layout) at 3, 5, 6 and 7 bits decodes
// to scale · (q − z) with the zero point as stored (v2), q and z read from
// the planar words, through the whole decode, a column window, the page's
// sample and the row stream alike; at 4 bits it is a gptq_v2 module.
func TestGPTQPlanarModule(t *testing.T) {
	const in, out, group = 128, 64, 32
	r := rand.New(rand.NewPCG(5, 6))
	for _, bits := range []int{3, 4, 5, 6, 7} {
		codes := make([]uint8, in*out) // stored [in, out]
		for i := range codes {
			codes[i] = uint8(r.IntN(1 << bits))
		}
		groups := in / group
		zeros := make([]uint8, groups*out)
		scales := make([]float32, groups*out)
		sb := make([]byte, 2*len(scales))
		for i := range zeros {
			zeros[i] = uint8(r.IntN(1 << bits))
			scales[i] = numeric.F16ToFloat32(numeric.Float32ToF16(float32(0.001 + 0.01*r.Float64())))
			binary.LittleEndian.PutUint16(sb[2*i:], numeric.Float32ToF16(scales[i]))
		}
		qw, err := packing.PackGPTQPlanarWeight(codes, in, out, bits)
		if err != nil {
			t.Fatal(err)
		}
		qz, err := packing.PackPlanarRowBits(zeros, groups, out, bits)
		if err != nil {
			t.Fatal(err)
		}
		mem := newMem(t, []safetensors.WriteTensor{
			{Name: "m.qweight", DType: safetensors.I32, Shape: []uint64{uint64(in * bits / 32), out}, Data: qw},
			{Name: "m.qzeros", DType: safetensors.I32, Shape: []uint64{uint64(groups), uint64(out * bits / 32)}, Data: qz},
			{Name: "m.scales", DType: safetensors.F16, Shape: []uint64{uint64(groups), out}, Data: sb},
		})
		s := &Scheme{Method: "gptq", Family: FamilyInt, Bits: bits, GroupSize: group, CheckpointFormat: "gptq_p"}
		m := Group(mem.infos(), s, nil)[0]
		wantLayout := LayoutGPTQp
		if bits == 4 {
			wantLayout = LayoutGPTQv2
		}
		if m.Layout != wantLayout || m.WeightShape[0] != out || m.WeightShape[1] != in || len(CheckModules([]*Module{m}, s)) != 0 {
			t.Fatalf("%d bits: module %+v, findings %+v", bits, m, CheckModules([]*Module{m}, s))
		}
		want := func(o, i int) float32 {
			g := i / group
			return scales[g*out+o] * (float32(codes[i*out+o]) - float32(zeros[g*out+o]))
		}
		all, err := Dequantize(m, mem, 0, out)
		if err != nil {
			t.Fatal(err)
		}
		for o := range out {
			for i := range in {
				if got := all[o*in+i]; math.Float32bits(got) != math.Float32bits(want(o, i)) {
					t.Fatalf("%d bits [%d, %d] = %g, want %g", bits, o, i, got, want(o, i))
				}
			}
		}
		win, err := DequantizeWindow(m, mem, 5, 9, 30, 70)
		if err != nil {
			t.Fatal(err)
		}
		smp, err := SampleRows(m, mem, 5, 9, 30, 70)
		if err != nil {
			t.Fatal(err)
		}
		for o := 5; o < 9; o++ {
			for i := 30; i < 70; i++ {
				k := (o-5)*40 + i - 30
				if win[k] != want(o, i) || smp.Values[k] != want(o, i) {
					t.Fatalf("%d bits window [%d, %d]: %g, sample %g, want %g", bits, o, i, win[k], smp.Values[k], want(o, i))
				}
			}
		}
		rs, err := OpenRows(m, mem)
		if err != nil {
			t.Fatal(err)
		}
		band := make([]float32, 3*in)
		if err := rs.NewDecoder().Decode(band, 10, 13, nil); err != nil {
			t.Fatal(err)
		}
		for k, v := range band {
			if v != all[10*in+k] {
				t.Fatalf("%d bits stream value %d: %g, want %g", bits, k, v, all[10*in+k])
			}
		}
	}
}
