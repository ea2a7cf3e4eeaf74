package synth

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/packing"
	st "github.com/quantscope/quantscope/formats/safetensors"
)

func bf16Bytes(x []float32) []byte {
	b := make([]byte, 2*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint16(b[2*i:], numeric.Float32ToBF16(v))
	}
	return b
}

func f16Bytes(x []float32) []byte {
	b := make([]byte, 2*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint16(b[2*i:], numeric.Float32ToF16(v))
	}
	return b
}

func f32Bytes(x ...float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func i32Bytes(x []int32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

func i64Bytes(x ...int64) []byte {
	b := make([]byte, 8*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
	return b
}

func rowsCols(m Matrix) (int, int) {
	cols := int(m.Shape[len(m.Shape)-1])
	return len(m.Data) / cols, cols
}

func withLast(shape []uint64, v uint64) []uint64 {
	out := append([]uint64(nil), shape...)
	out[len(out)-1] = v
	return out
}

// Dense stores a weight unquantized in BF16.
func Dense(name string, m Matrix) []st.WriteTensor {
	return []st.WriteTensor{{Name: name, DType: st.BF16, Shape: m.Shape, Data: bf16Bytes(m.Data)}}
}

// nvfp4Codes quantizes as ModelOpt's NVFP4 recipe: a global scale
// amax/(6·448), one E4M3 scale per 16 values (amax_b / (6·global), a zero
// becoming 1, clamped to [2^-9, 448]), E2M1 codes of w / (scale·global).
func nvfp4Codes(m Matrix) (packed []byte, scales []byte, global float32) {
	rows, cols := rowsCols(m)
	amax := absMax(m.Data)
	if amax == 0 {
		amax = 1
	}
	global = amax / (6 * 448)
	blocks := cols / 16
	scales = make([]byte, rows*blocks)
	codes := make([]byte, len(m.Data))
	for b := range rows * blocks {
		blk := m.Data[b*16 : b*16+16]
		s := absMax(blk) / (6 * global)
		if s == 0 {
			s = 1
		}
		s = min(max(s, 1.0/512), 448)
		sc := numeric.Float32ToE4M3(s)
		scales[b] = sc
		denom := numeric.E4M3ToFloat32(sc) * global
		for i, v := range blk {
			codes[b*16+i] = numeric.Float32ToE2M1(v / denom)
		}
	}
	packed = make([]byte, len(codes)/2)
	numeric.PackE2M1(packed, codes)
	return packed, scales, global
}

// NVFP4ModelOpt writes a ModelOpt NVFP4 linear: weight U8 [out, in/2],
// weight_scale F8_E4M3 [out, in/16], weight_scale_2 and input_scale F32 [].
// s2DType BF16 writes weight_scale_2 as a BF16 [1] tensor, as one real export does.
func NVFP4ModelOpt(name string, m Matrix, inputAmax float32, s2DType st.DType) []st.WriteTensor {
	packed, scales, global := nvfp4Codes(m)
	_, cols := rowsCols(m)
	s2 := st.WriteTensor{Name: name + ".weight_scale_2", DType: st.F32, Shape: []uint64{}, Data: f32Bytes(global)}
	if s2DType == st.BF16 {
		s2 = st.WriteTensor{Name: name + ".weight_scale_2", DType: st.BF16, Shape: []uint64{1}, Data: bf16Bytes([]float32{global})}
	}
	return []st.WriteTensor{
		{Name: name + ".weight", DType: st.U8, Shape: withLast(m.Shape, uint64(cols/2)), Data: packed},
		{Name: name + ".weight_scale", DType: st.F8_E4M3, Shape: withLast(m.Shape, uint64(cols/16)), Data: scales},
		s2,
		{Name: name + ".input_scale", DType: st.F32, Shape: []uint64{}, Data: f32Bytes(inputAmax / (6 * 448))},
	}
}

// NVFP4CT writes compressed-tensors nvfp4-pack-quantized: weight_packed U8,
// weight_scale F8_E4M3, weight_global_scale and input_global_scale F32 [1]
// (the inverses of ModelOpt's scales).
func NVFP4CT(name string, m Matrix, inputAmax float32) []st.WriteTensor {
	packed, scales, global := nvfp4Codes(m)
	_, cols := rowsCols(m)
	return []st.WriteTensor{
		{Name: name + ".weight_packed", DType: st.U8, Shape: withLast(m.Shape, uint64(cols/2)), Data: packed},
		{Name: name + ".weight_scale", DType: st.F8_E4M3, Shape: withLast(m.Shape, uint64(cols/16)), Data: scales},
		{Name: name + ".weight_global_scale", DType: st.F32, Shape: []uint64{1}, Data: f32Bytes(1 / global)},
		{Name: name + ".input_global_scale", DType: st.F32, Shape: []uint64{1}, Data: f32Bytes(6 * 448 / inputAmax)},
	}
}

func fp8(x []float32, scale float32) []byte {
	b := make([]byte, len(x))
	for i, v := range x {
		b[i] = numeric.Float32ToE4M3(v / scale)
	}
	return b
}

// FP8Tensor writes a per-tensor FP8 linear (ModelOpt FP8): weight F8_E4M3,
// weight_scale F32 [] = amax/448, input_scale F32 [].
func FP8Tensor(name string, m Matrix, inputAmax float32) []st.WriteTensor {
	s := absMax(m.Data) / 448
	return []st.WriteTensor{
		{Name: name + ".weight", DType: st.F8_E4M3, Shape: m.Shape, Data: fp8(m.Data, s)},
		{Name: name + ".weight_scale", DType: st.F32, Shape: []uint64{}, Data: f32Bytes(s)},
		{Name: name + ".input_scale", DType: st.F32, Shape: []uint64{}, Data: f32Bytes(inputAmax / 448)},
	}
}

// FP8Channel writes compressed-tensors float-quantized with channel strategy:
// weight F8_E4M3 and weight_scale BF16 [out, 1].
func FP8Channel(name string, m Matrix) []st.WriteTensor {
	rows, cols := rowsCols(m)
	codes := make([]byte, len(m.Data))
	scales := make([]float32, rows)
	for r := range rows {
		row := m.Data[r*cols : (r+1)*cols]
		s := numeric.BF16ToFloat32(numeric.Float32ToBF16(absMax(row) / 448))
		scales[r] = s
		copy(codes[r*cols:], fp8(row, s))
	}
	return []st.WriteTensor{
		{Name: name + ".weight", DType: st.F8_E4M3, Shape: m.Shape, Data: codes},
		{Name: name + ".weight_scale", DType: st.BF16, Shape: []uint64{uint64(rows), 1}, Data: bf16Bytes(scales)},
	}
}

// FP8Block writes DeepSeek-V3's layout: weight F8_E4M3 and weight_scale_inv
// F32 [ceil(out/128), ceil(in/128)], a multiplier despite its name.
func FP8Block(name string, m Matrix, block int) []st.WriteTensor {
	rows, cols := rowsCols(m)
	br, bc := (rows+block-1)/block, (cols+block-1)/block
	scales := make([]float32, br*bc)
	for i := range br {
		for j := range bc {
			var a float32
			for r := i * block; r < min((i+1)*block, rows); r++ {
				a = max(a, absMax(m.Data[r*cols+j*block:r*cols+min((j+1)*block, cols)]))
			}
			if a == 0 {
				a = 448
			}
			scales[i*bc+j] = a / 448
		}
	}
	codes := make([]byte, len(m.Data))
	for r := range rows {
		for c := range cols {
			codes[r*cols+c] = numeric.Float32ToE4M3(m.Data[r*cols+c] / scales[(r/block)*bc+c/block])
		}
	}
	return []st.WriteTensor{
		{Name: name + ".weight", DType: st.F8_E4M3, Shape: m.Shape, Data: codes},
		{Name: name + ".weight_scale_inv", DType: st.F32, Shape: []uint64{uint64(br), uint64(bc)}, Data: f32Bytes(scales...)},
	}
}

// intGroups quantizes each row in groups of g columns to b bits: symmetric
// (codes −2^(b−1)..2^(b−1)−1, zero 0) or asymmetric (zero point in the same
// signed range, so it packs like the codes, and at least zmin). Scales are
// rounded to the stored dtype first.
func intGroups(m Matrix, bits, g int, sym bool, zmin int, round func(float32) float32) (codes []int8, scales []float32, zeros []int8) {
	rows, cols := rowsCols(m)
	groups := (cols + g - 1) / g
	codes = make([]int8, len(m.Data))
	scales = make([]float32, rows*groups)
	zeros = make([]int8, rows*groups)
	qmin, qmax := -float32(int(1)<<(bits-1)), float32(int(1)<<(bits-1)-1)
	for r := range rows {
		for k := range groups {
			seg := m.Data[r*cols+k*g : r*cols+min((k+1)*g, cols)]
			lo, hi := float32(0), float32(0)
			for _, v := range seg {
				lo, hi = min(lo, v), max(hi, v)
			}
			var s, z float32
			if sym {
				s = max(-lo, hi) / ((qmax - qmin) / 2)
			} else {
				s = (hi - lo) / (qmax - qmin)
			}
			if s == 0 {
				s = 1
			}
			s = round(s)
			if !sym {
				z = min(max(float32(math.Round(float64(qmin-lo/s))), qmin, float32(zmin)), qmax)
			}
			scales[r*groups+k] = s
			zeros[r*groups+k] = int8(z)
			for i, v := range seg {
				q := float32(math.RoundToEven(float64(v/s))) + z
				codes[r*cols+k*g+i] = int8(min(max(q, qmin), qmax))
			}
		}
	}
	return codes, scales, zeros
}

func roundBF16(x float32) float32 { return numeric.BF16ToFloat32(numeric.Float32ToBF16(x)) }
func roundF16(x float32) float32  { return numeric.F16ToFloat32(numeric.Float32ToF16(x)) }

// CTPack writes compressed-tensors pack-quantized: weight_packed I32,
// weight_scale BF16 [out, groups], weight_shape I64 [2], and for asymmetric
// schemes weight_zero_point packed along dim 0.
func CTPack(name string, m Matrix, bits, group int, sym bool, layout packing.CTLayout) []st.WriteTensor {
	rows, cols := rowsCols(m)
	codes, scales, zeros := intGroups(m, bits, group, sym, -128, roundBF16)
	packed, err := packing.PackCT(codes, rows, cols, bits, layout)
	if err != nil {
		panic(err)
	}
	groups := (cols + group - 1) / group
	out := []st.WriteTensor{
		{Name: name + ".weight_packed", DType: st.I32, Shape: []uint64{uint64(rows), uint64(packing.CTWordsPerRow(cols, bits, layout))}, Data: packed},
		{Name: name + ".weight_scale", DType: st.BF16, Shape: []uint64{uint64(rows), uint64(groups)}, Data: bf16Bytes(scales)},
		{Name: name + ".weight_shape", DType: st.I64, Shape: []uint64{2}, Data: i64Bytes(int64(rows), int64(cols))},
	}
	if !sym {
		zp, err := packing.PackCTDim0(zeros, rows, groups, bits, layout)
		if err != nil {
			panic(err)
		}
		out = append(out, st.WriteTensor{Name: name + ".weight_zero_point", DType: st.I32,
			Shape: []uint64{uint64(packing.CTWordsPerRow(rows, bits, layout)), uint64(groups)}, Data: zp})
	}
	return out
}

// unsignedInt quantizes [out, in] asymmetrically to unsigned codes 0..2^b−1
// per group of g inputs, returning the codes transposed to GPTQ/AWQ's stored
// [in, out] and scales and zeros as [groups, out]. minZero bounds the unsigned
// zero point from below: GPTQ v1 stores z−1 and so cannot hold a zero of 0.
func unsignedInt(m Matrix, bits, g, minZero int) (codesInOut []uint8, scales []float32, zeros []uint8) {
	out, in := rowsCols(m)
	codes, sc, zs := intGroups(m, bits, g, false, minZero-int(1)<<(bits-1), roundF16)
	groups := (in + g - 1) / g
	off := int(1) << (bits - 1)
	codesInOut = make([]uint8, in*out)
	for o := range out {
		for i := range in {
			codesInOut[i*out+o] = uint8(int(codes[o*in+i]) + off)
		}
	}
	scales = make([]float32, groups*out)
	zeros = make([]uint8, groups*out)
	for o := range out {
		for k := range groups {
			scales[k*out+o] = sc[o*groups+k]
			zeros[k*out+o] = uint8(int(zs[o*groups+k]) + off)
		}
	}
	return codesInOut, scales, zeros
}

// GPTQ writes a GPTQ (v1, checkpoint_format "gptq") linear: qweight, qzeros
// holding z−1, scales F16 [groups, out], g_idx I32 [in].
func GPTQ(name string, m Matrix, bits, g int) []st.WriteTensor {
	out, in := rowsCols(m)
	codes, scales, zeros := unsignedInt(m, bits, g, 1)
	qw, err := packing.PackGPTQWeight(codes, in, out, bits)
	if err != nil {
		panic(err)
	}
	stored := make([]uint8, len(zeros))
	for i, z := range zeros {
		stored[i] = (z - 1) & (1<<bits - 1)
	}
	groups := (in + g - 1) / g
	qz, err := packing.PackRowBits(stored, groups, out, bits)
	if err != nil {
		panic(err)
	}
	gidx := make([]int32, in)
	for i := range gidx {
		gidx[i] = int32(i / g)
	}
	return []st.WriteTensor{
		{Name: name + ".qweight", DType: st.I32, Shape: []uint64{uint64(in * bits / 32), uint64(out)}, Data: qw},
		{Name: name + ".qzeros", DType: st.I32, Shape: []uint64{uint64(groups), uint64((out*bits + 31) / 32)}, Data: qz},
		{Name: name + ".scales", DType: st.F16, Shape: []uint64{uint64(groups), uint64(out)}, Data: f16Bytes(scales)},
		{Name: name + ".g_idx", DType: st.I32, Shape: []uint64{uint64(in)}, Data: i32Bytes(gidx)},
	}
}

// AWQ writes an AutoAWQ gemm linear: qweight [in, out/8], qzeros [in/g, out/8],
// scales F16 [in/g, out].
func AWQ(name string, m Matrix, g int) []st.WriteTensor {
	out, in := rowsCols(m)
	codes, scales, zeros := unsignedInt(m, 4, g, 0)
	qw, err := packing.PackAWQ(codes, in, out)
	if err != nil {
		panic(err)
	}
	groups := in / g
	qz, err := packing.PackAWQ(zeros, groups, out)
	if err != nil {
		panic(err)
	}
	return []st.WriteTensor{
		{Name: name + ".qweight", DType: st.I32, Shape: []uint64{uint64(in), uint64(out / 8)}, Data: qw},
		{Name: name + ".qzeros", DType: st.I32, Shape: []uint64{uint64(groups), uint64(out / 8)}, Data: qz},
		{Name: name + ".scales", DType: st.F16, Shape: []uint64{uint64(groups), uint64(out)}, Data: f16Bytes(scales)},
	}
}

// MXFP4 writes gpt-oss's layout for a [..., n] weight: `name_blocks` U8
// [..., n/32, 16] and `name_scales` U8 [..., n/32], the shared exponent of a
// block being floor(log2(amax)) − 2 (E2M1's largest exponent), as the OCP MX
// spec computes it.
func MXFP4(name string, m Matrix) []st.WriteTensor {
	n := len(m.Data) / 32
	scales := make([]byte, n)
	codes := make([]byte, len(m.Data))
	for b := range n {
		blk := m.Data[32*b : 32*b+32]
		a := absMax(blk)
		e := -127
		if a > 0 {
			_, fe := math.Frexp(float64(a)) // a = f·2^fe, f in [0.5, 1)
			e = max(fe-1-2, -127)
		}
		scales[b] = byte(e + 127)
		s := float32(math.Ldexp(1, e))
		for i, v := range blk {
			codes[32*b+i] = numeric.Float32ToE2M1(v / s)
		}
	}
	packed := make([]byte, len(codes)/2)
	numeric.PackE2M1(packed, codes)
	lead := m.Shape[:len(m.Shape)-1]
	cols := m.Shape[len(m.Shape)-1]
	return []st.WriteTensor{
		{Name: name + "_blocks", DType: st.U8, Shape: append(append([]uint64{}, lead...), cols/32, 16), Data: packed},
		{Name: name + "_scales", DType: st.U8, Shape: append(append([]uint64{}, lead...), cols/32), Data: scales},
	}
}

// ModelOptAWQInt4PreQuant is ModelOptAWQInt4 of a layer that keeps AWQ's
// pre_quant_scale s (one BF16 factor an input column, drawn from r between
// 1/2 and 2): the layer multiplies its input by s, so the file holds m's
// columns divided by s, quantized, and s. m is the weight the raw input
// meets, stored · s column by column.
func ModelOptAWQInt4PreQuant(name string, m Matrix, group int, r *rand.Rand) []st.WriteTensor {
	rows, cols := rowsCols(m)
	s := make([]float32, cols)
	for c := range s {
		s[c] = numeric.BF16ToFloat32(numeric.Float32ToBF16(float32(math.Exp2(2*r.Float64() - 1))))
	}
	stored := Matrix{Shape: m.Shape, Data: make([]float32, len(m.Data))}
	for i := range rows * cols {
		stored.Data[i] = m.Data[i] / s[i%cols]
	}
	return append(ModelOptAWQInt4(name, stored, group),
		st.WriteTensor{Name: name + ".pre_quant_scale", DType: st.BF16, Shape: []uint64{uint64(cols)}, Data: bf16Bytes(s)})
}

// ModelOptAWQInt4 writes a ModelOpt INT4 AWQ linear as its export does
// (modelopt/torch/export/quant_utils.py): per [row, group] block scale =
// amax / 7 in float32 (weight_scale F32 [out, in/group]), code =
// clamp(round-half-even(w / scale), −8, 7), packed in pairs of output rows
// (weight U8 [out/2, in]), with no pre_quant_scale (as one folded into
// the norm before the layer). A zero block would have a zero scale, which
// the producer refuses; the generated weights have none.
func ModelOptAWQInt4(name string, m Matrix, group int) []st.WriteTensor {
	rows, cols := rowsCols(m)
	groups := (cols + group - 1) / group
	codes := make([]int8, rows*cols)
	scales := make([]float32, rows*groups)
	for r := range rows {
		for g := range groups {
			lo, hi := g*group, min((g+1)*group, cols)
			var amax float32
			for _, x := range m.Data[r*cols+lo : r*cols+hi] {
				amax = max(amax, float32(math.Abs(float64(x))))
			}
			s := amax / 7
			scales[r*groups+g] = s
			for c := lo; c < hi; c++ {
				codes[r*cols+c] = int8(max(-8, min(7, math.RoundToEven(float64(m.Data[r*cols+c]/s)))))
			}
		}
	}
	packed, err := packing.PackModelOptInt4(codes, rows, cols)
	if err != nil {
		panic(err)
	}
	return []st.WriteTensor{
		{Name: name + ".weight", DType: st.U8, Shape: []uint64{uint64(rows / 2), uint64(cols)}, Data: packed},
		{Name: name + ".weight_scale", DType: st.F32, Shape: []uint64{uint64(rows), uint64(groups)}, Data: f32Bytes(scales...)},
	}
}
