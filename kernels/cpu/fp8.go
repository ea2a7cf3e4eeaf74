package cpu

import (
	"context"
	"fmt"
	"math"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/kernels"
)

// float32Tiny is torch.finfo(torch.float32).tiny, the smallest normal float32.
const float32Tiny = 0x1p-126

// fp8Codec is one FP8 element format: its largest finite value and its
// round-to-nearest-even cast (torch's: the sign bit is copied, so -0 and a
// negative value that rounds to zero give 0x80).
type fp8Codec struct {
	max    float32
	encode func(float32) byte
}

func fp8CodecOf(format string) (fp8Codec, error) {
	switch format {
	case kernels.FP8E4M3:
		return fp8Codec{numeric.E4M3Max, numeric.Float32ToE4M3}, nil
	case kernels.FP8E5M2:
		return fp8Codec{numeric.E5M2Max, numeric.Float32ToE5M2}, nil
	}
	return fp8Codec{}, fmt.Errorf("rule fp8-format: unknown FP8 format %q (want e4m3 or e5m2)", format)
}

// fp8Grid works out the scale region of opt over a rows × cols matrix.
func fp8Grid(opt kernels.FP8Options, rows, cols int) (br, bc int, shape []int, err error) {
	switch opt.Scale {
	case kernels.ScaleTensor:
		return rows, cols, []int{}, nil
	case kernels.ScaleRow, "":
		return 1, cols, []int{rows}, nil
	case kernels.ScaleBlock:
		br, bc = opt.Block[0], opt.Block[1]
		if br <= 0 || bc <= 0 {
			return 0, 0, nil, fmt.Errorf("rule fp8-block: block %d×%d must be two positive sizes", br, bc)
		}
		if rows%br != 0 || cols%bc != 0 {
			return 0, 0, nil, fmt.Errorf("rule fp8-block: block %d×%d does not divide the %d×%d weight", br, bc, rows, cols)
		}
		return br, bc, []int{rows / br, cols / bc}, nil
	}
	return 0, 0, nil, fmt.Errorf("rule fp8-scale: unknown scale granularity %q (want tensor, row or block)", opt.Scale)
}

// fp8Scale is the scale of one region as stored, from its amax.
//
// Inverse (GPT-QModel _compute_scale_inv): f32(fp8_max / max(amax, tiny)),
// 1 for an all-zero region. A positive amax below float32 tiny would make
// that infinite (and zeros NaN); it is held at the largest float32 instead,
// so codes stay finite and w = q / scale_inv still reads back.
//
// Direct (ModelOpt, compressed-tensors): f32(amax / fp8_max), 1 for an
// all-zero region; one that underflows to 0 becomes the smallest float32
// (w / scale then stays within the clamp).
func fp8Scale(amax, fmax float32, inverse bool) float32 {
	if amax == 0 {
		return 1
	}
	if inverse {
		s := fmax / max(amax, float32Tiny)
		if s > math.MaxFloat32 {
			s = math.MaxFloat32
		}
		return s
	}
	s := amax / fmax
	if s == 0 {
		s = math.SmallestNonzeroFloat32
	}
	return s
}

// halfRounder is the round-to-nearest-even of a 16-bit dtype, and its
// smallest and largest positive finite values (a scale held within them).
type halfRounder struct {
	round    func(float32) float32
	tiny, hi float32
}

func halfRounderOf(half string) (*halfRounder, error) {
	switch half {
	case "":
		return nil, nil
	case kernels.HalfBF16:
		return &halfRounder{func(x float32) float32 { return numeric.BF16ToFloat32(numeric.Float32ToBF16(x)) }, 0x1p-133, 0x1.fep127}, nil
	case kernels.HalfF16:
		return &halfRounder{func(x float32) float32 { return numeric.F16ToFloat32(numeric.Float32ToF16(x)) }, 0x1p-24, 65504}, nil
	}
	return nil, fmt.Errorf("rule fp8-half: unknown 16-bit dtype %q (want bf16 or f16)", half)
}

// scale rounds a positive scale to the dtype, kept positive and finite so
// that w / scale stays within the clamp.
func (h *halfRounder) scale(s float32) float32 {
	return min(max(h.round(s), h.tiny), h.hi)
}

// QuantizeFP8 implements kernels.Quantizer.
func (b *Backend) QuantizeFP8(ctx context.Context, w kernels.Matrix, opt kernels.FP8Options, p kernels.Progress) (*kernels.FP8Result, error) {
	if err := checkWeight(w); err != nil {
		return nil, err
	}
	codec, err := fp8CodecOf(opt.Format)
	if err != nil {
		return nil, err
	}
	br, bc, shape, err := fp8Grid(opt, w.Rows, w.Cols)
	if err != nil {
		return nil, err
	}
	h16, err := halfRounderOf(opt.Half)
	if err != nil {
		return nil, err
	}
	if opt.Inverse {
		h16 = nil
	}
	half := func(done, total int64) {
		if p != nil {
			p(done, 2*total)
		}
	}
	ra, err := b.rowAmax(ctx, w, bc, half)
	if err != nil {
		return nil, err
	}
	nbc := w.Cols / bc
	nbr := w.Rows / br
	scales := make([]float32, nbr*nbc)
	for i := range nbr {
		for k := range nbc {
			var m float32
			for r := i * br; r < (i+1)*br; r++ {
				m = max(m, ra[r*nbc+k])
			}
			s := fp8Scale(m, codec.max, opt.Inverse)
			if h16 != nil && opt.HalfScale {
				s = h16.scale(s)
			}
			scales[i*nbc+k] = s
		}
	}
	codes := make([]byte, len(w.Data))
	fmax := codec.max
	err = b.eachRows(ctx, w.Rows, w.Cols, func(done, total int64) { half(total+done, total) }, func(lo, hi int) error {
		for r := lo; r < hi; r++ {
			row := w.Data[r*w.Cols : (r+1)*w.Cols]
			out := codes[r*w.Cols : (r+1)*w.Cols]
			for k := range nbc {
				s := scales[(r/br)*nbc+k]
				if h16 != nil {
					// Half(w / Half(scale)), then the FP8 cast
					d := h16.scale(s)
					for j := k * bc; j < (k+1)*bc; j++ {
						out[j] = codec.encode(min(max(h16.round(row[j]/d), -fmax), fmax))
					}
					continue
				}
				for j := k * bc; j < (k+1)*bc; j++ {
					var v float32
					if opt.Inverse {
						v = row[j] * s
					} else {
						v = row[j] / s
					}
					out[j] = codec.encode(min(max(v, -fmax), fmax))
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &kernels.FP8Result{Codes: codes, Scales: scales, ScaleShape: shape}, nil
}
