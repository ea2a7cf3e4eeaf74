package cuda

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cuda/wire"
)

// FP8Grid is how FP8 scales cover a [Rows, Cols] weight: one scale per R×C
// tile (tensor: R = Rows, C = Cols; row: R = 1, C = Cols), the scales
// row-major over ceil(Rows/R) × ceil(Cols/C).
type FP8Grid struct {
	Rows, Cols, R, C int
	E5M2             bool // element format e5m2, else e4m3fn
	Inverse          bool // divide by the scale (GPT-QModel's weight_scale_inv)
}

func (g FP8Grid) scaleCols() int { return (g.Cols + g.C - 1) / g.C }

func (g FP8Grid) check(codes []byte, scales []float32) error {
	if g.Rows < 0 || g.Cols < 0 || g.R <= 0 || g.C <= 0 {
		return fmt.Errorf("rule fp8-grid: bad grid %+v", g)
	}
	if len(codes) != g.Rows*g.Cols {
		return fmt.Errorf("rule fp8-shape: %d codes for [%d, %d]", len(codes), g.Rows, g.Cols)
	}
	if want := (g.Rows + g.R - 1) / g.R * g.scaleCols(); len(scales) != want {
		return fmt.Errorf("rule fp8-scale-shape: %d scales, the %d×%d grid over [%d, %d] needs %d", len(scales), g.R, g.C, g.Rows, g.Cols, want)
	}
	return nil
}

// DequantFP8 decodes FP8 codes with their scales: v·scale, or v/scale
// when g.Inverse (formats/scheme's FP8 decode).
func (b *Backend) DequantFP8(ctx context.Context, codes []byte, scales []float32, g FP8Grid) ([]float32, error) {
	if err := g.check(codes, scales); err != nil {
		return nil, err
	}
	n := len(codes)
	req := wire.Request{Op: wire.OpDequantFP8, Rows: int64(g.Rows), Cols: int64(g.Cols), R: int64(g.R), C: int64(g.C), Inv: g.Inverse, E5M2: g.E5M2}
	r, out, err := b.call(ctx, int64(5*n+4*len(scales)), req, codes, f32Bytes(scales))
	if err == nil {
		return bytesF32(out, 0, n, r)
	}
	if _, ok := err.(*errFallback); !ok {
		return nil, err
	}
	dst := make([]float32, n)
	dec := numeric.E4M3ToFloat32
	if g.E5M2 {
		dec = numeric.E5M2ToFloat32
	}
	sc := g.scaleCols()
	for i, c := range codes {
		s := scales[(i/g.Cols)/g.R*sc+(i%g.Cols)/g.C]
		if g.Inverse {
			dst[i] = dec(c) / s
		} else {
			dst[i] = dec(c) * s
		}
	}
	return dst, nil
}

// DequantNVFP4 decodes NVFP4 (16-value blocks, element 2j in the low nibble
// of byte j, E4M3 block scales): e2m1 · f32(f32(scale) · global). global is
// ModelOpt's weight_scale_2, or f32(1 / weight_global_scale) for
// compressed-tensors (NVFP4Global).
func (b *Backend) DequantNVFP4(ctx context.Context, packed, scales []byte, global float32) ([]float32, error) {
	n := 2 * len(packed)
	if n%16 != 0 || len(scales) != n/16 {
		return nil, fmt.Errorf("rule nvfp4-shape: %d packed bytes and %d scales (want 8 bytes a scale)", len(packed), len(scales))
	}
	r, out, err := b.call(ctx, int64(n*4+len(packed)+len(scales)), wire.Request{Op: wire.OpDequantNVFP4, Global: global}, packed, scales)
	if err == nil {
		return bytesF32(out, 0, n, r)
	}
	if _, ok := err.(*errFallback); !ok {
		return nil, err
	}
	dst := make([]float32, n)
	for i := range dst {
		d := numeric.E4M3ToFloat32(scales[i/16]) * global
		dst[i] = numeric.E2M1ToFloat32(packed[i/2]>>(4*(i&1))&15) * d
	}
	return dst, nil
}

// NVFP4Global is the block-scale multiplier of an NVFP4 weight in either
// naming: ModelOpt's weight_scale_2 as is, compressed-tensors'
// weight_global_scale inverted (as formats/scheme does).
func NVFP4Global(v float32, compressedTensors bool) float32 {
	if compressedTensors {
		return 1 / v
	}
	return v
}

// DequantMXFP4 decodes MXFP4 (32-value blocks, E8M0 scales).
func (b *Backend) DequantMXFP4(ctx context.Context, packed, scales []byte) ([]float32, error) {
	n := 2 * len(packed)
	if len(packed) != 16*len(scales) {
		return nil, fmt.Errorf("rule mxfp4-shape: %d packed bytes and %d scales (want 16 bytes a scale)", len(packed), len(scales))
	}
	r, out, err := b.call(ctx, int64(n*4+len(packed)+len(scales)), wire.Request{Op: wire.OpDequantMXFP4}, packed, scales)
	if err == nil {
		return bytesF32(out, 0, n, r)
	}
	if _, ok := err.(*errFallback); !ok {
		return nil, err
	}
	dst := make([]float32, n)
	return dst, packing.DecodeMXFP4(dst, packed, scales)
}

// QuantizeNVFP4 runs the max and mse recipes on the GPU (the others
// through quant2.go; input the CPU refuses on the CPU backend).
func (b *Backend) QuantizeNVFP4(ctx context.Context, w kernels.Matrix, opt kernels.NVFP4Options, p kernels.Progress) (*kernels.NVFP4Result, error) {
	recipe := opt.Recipe
	if recipe == "" {
		recipe = kernels.RecipeMax
	}
	cpuRun := func() (*kernels.NVFP4Result, error) { return b.Backend.QuantizeNVFP4(ctx, w, opt, p) }
	if recipe != kernels.RecipeMax && recipe != kernels.RecipeMSE {
		return b.quantizeNVFP4Recipe(ctx, w, opt, p, recipe) // quant2.go
	}
	if w.Rows <= 0 || w.Cols <= 0 || w.Cols%16 != 0 || len(w.Data) != w.Rows*w.Cols {
		return cpuRun() // its error names the rule
	}
	var amax float32
	for _, v := range w.Data {
		a := float32(math.Abs(float64(v)))
		if !(a <= math.MaxFloat32) {
			return cpuRun() // non-finite: the CPU's error
		}
		amax = max(amax, a)
	}
	// ModelOpt's global scale f32(amax / (6·448)); 1 for an all-zero weight
	scale2 := float32(1)
	if amax != 0 {
		scale2 = amax / (6 * 448)
		if float32(0x1p-9*scale2) == 0 {
			return cpuRun() // the CPU's nvfp4-global-scale error
		}
	}
	n := len(w.Data)
	req := wire.Request{Op: wire.OpQuantNVFP4, Rows: int64(w.Rows), Cols: int64(w.Cols), Recipe: recipe, Global: scale2}
	_, out, err := b.call(ctx, int64(4*n+n/2+n/16), req, f32Bytes(w.Data))
	if err != nil {
		if fellBack(err) {
			return cpuRun()
		}
		return nil, err
	}
	if len(out) != 2 || len(out[0]) != n/2 || len(out[1]) != n/16 {
		return nil, fmt.Errorf("cuda quant_nvfp4: the worker returned %d parts of the wrong sizes", len(out))
	}
	if p != nil {
		p(int64(w.Rows), int64(w.Rows))
	}
	return &kernels.NVFP4Result{Packed: out[0], Scales: out[1], Scale2: scale2, Rows: w.Rows, Cols: w.Cols}, nil
}

// W4AFP8 quantizes the activation on the CPU and runs the GEMM on the GPU.
func (b *Backend) W4AFP8(ctx context.Context, x kernels.Matrix, w *kernels.W4AWeight) (kernels.Matrix, error) {
	a, err := b.W4AFP8Quantize(ctx, x)
	if err != nil {
		return kernels.Matrix{}, err
	}
	return b.W4AFP8Linear(ctx, a, w)
}

// W4AFP8Linear runs the W4A-FP8 GEMM on the GPU: the INT4 codes cross as
// nibbles, the activation as E4M3 codes; the bias is added here.
func (b *Backend) W4AFP8Linear(ctx context.Context, a *kernels.FP8Tokens, w *kernels.W4AWeight) (kernels.Matrix, error) {
	cpuRun := func() (kernels.Matrix, error) { return b.Backend.W4AFP8Linear(ctx, a, w) }
	if a == nil || w == nil || a.Rows <= 0 || a.Cols != w.In || w.In%kernels.W4AGroup != 0 || w.Out <= 0 ||
		len(a.Codes) != a.Rows*a.Cols || len(a.Scales) != a.Rows || len(w.Codes) != w.In*w.Out ||
		len(w.Scales) != w.In/kernels.W4AGroup*w.Out || (w.Bias != nil && len(w.Bias) != w.Out) {
		return cpuRun() // empty input, or the CPU's error
	}
	if int64(a.Cols) > wire.W4AMaxK || a.Rows > wire.W4AMaxT || wire.W4ABytes(int64(a.Rows), int64(a.Cols), int64(w.Out)) > wire.MaxStep {
		b.logf("cuda: w4a_fp8 runs on the CPU: [%d, %d]×[%d, %d] exceeds the worker's limits (K ≤ %d, T ≤ %d, %d MiB)", a.Rows, a.Cols, w.Out, w.In, wire.W4AMaxK, wire.W4AMaxT, wire.MaxStep>>20)
		return cpuRun()
	}
	q := make([]byte, len(w.Codes)/2)
	for i := range q {
		lo, hi := w.Codes[2*i], w.Codes[2*i+1]
		if lo < -8 || lo > 7 || hi < -8 || hi > 7 {
			return cpuRun()
		}
		q[i] = byte(lo+8) | byte(hi+8)<<4
	}
	T, K, N := a.Rows, a.Cols, w.Out
	req := wire.Request{Op: wire.OpW4AFP8, T: int64(T), K: int64(K), N: int64(N)}
	return b.gemm(ctx, int64(T*K+4*T+len(q)+4*len(w.Scales)+4*T*N), req, w.Bias, cpuRun, a.Codes, f32Bytes(a.Scales), q, f32Bytes(w.Scales))
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// bytesF32 decodes part k of a response as n float32 values.
func bytesF32(parts [][]byte, k, n int, r wire.Response) ([]float32, error) {
	if k >= len(parts) || len(parts[k]) != 4*n {
		return nil, fmt.Errorf("cuda: response %d: want %d float32 values in part %d, got parts %v", r.ID, n, k, r.Parts)
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(parts[k][4*i:]))
	}
	return v, nil
}
