package kernels

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/scheme"
)

// W4AGroup is the only group size the W4A linears accept (GPT-QModel's
// W4AFP8Linear and W4ANVFP4Linear: bits 4, group 128, symmetric, desc_act
// off): scheme.W4AGroup, which decides which modules W4A can run.
const W4AGroup = scheme.W4AGroup

// W4AWeight is a GPTQ INT4 linear prepared for the W4A kernels: its centred
// codes c = q − 8 (each in −8..7, exact as E4M3, E2M1-plane or integer values)
// and its group scales.
type W4AWeight struct {
	Name    string    // the module, for errors
	In, Out int       // the logical weight is [Out, In]
	Codes   []int8    // centred codes, row-major [Out, In]
	Scales  []float32 // group scales, row-major [Out, In/128]
	Bias    []float32 // nil, or Out values
}

// W4A is the family of linear operations the Llama forward runs: the dense
// float32 linear and the W4A linears on GPTQ INT4 weights.
type W4A interface {
	// LinearF32 returns y = x·wᵀ + bias for x [T, K] and w [N, K] (bias nil
	// or N values), each output summed in float32 in input order, the bias
	// added last.
	LinearF32(ctx context.Context, x, w Matrix, bias []float32) (Matrix, error)
	// W4AFP8 is GPT-QModel's W4A-FP8 linear: each token row of x quantized
	// to E4M3 with the direct scale amax/448, the per-group products with the
	// centred INT4 codes summed, scaled by the group scale, summed over
	// groups, scaled by the token scale, plus the bias.
	W4AFP8(ctx context.Context, x Matrix, w *W4AWeight) (Matrix, error)
	// W4AFP8Quantize is W4AFP8's activation side alone, so that the
	// projections sharing one operand (q/k/v, gate/up) quantize it once.
	W4AFP8Quantize(ctx context.Context, x Matrix) (*FP8Tokens, error)
	// W4AFP8Linear is W4AFP8's GEMM on an already quantized operand.
	W4AFP8Linear(ctx context.Context, a *FP8Tokens, w *W4AWeight) (Matrix, error)
	W4ANVFP4
}

// FP8Tokens is an activation quantized for W4A-FP8: one E4M3 code per value
// (row-major [Rows, Cols]) and one direct scale per token row.
type FP8Tokens struct {
	Rows, Cols int
	Codes      []byte
	Scales     []float32
}

// W4AError is a weight or an input the W4A linears refuse.
type W4AError struct {
	Module, Rule, Msg string
}

func (e *W4AError) Error() string {
	return fmt.Sprintf("module %q: rule %s: %s", e.Module, e.Rule, e.Msg)
}

// GPTQInt4 is a GPTQ INT4 linear as stored: qweight I32 [in/8, out], qzeros
// I32 [in/128, out/8], scales (already float32) [in/128, out], g_idx [in] or
// nil. V1 is checkpoint_format "gptq", whose zero points are stored minus one.
type GPTQInt4 struct {
	Name    string
	In, Out int
	QWeight []byte
	QZeros  []byte // nil: every zero point is 8
	Scales  []float32
	GIdx    []int32
	V1      bool
	Bias    []float32
}

// PrepareW4A checks a GPTQ INT4 linear against GPT-QModel's W4A rules
// (w4a_floatx.py:22-30, :133-151): in % 128 == 0, out % 32 == 0, every
// group's zero point 8 (v1: stored 7), g_idx == i/128; and returns its
// centred codes.
func PrepareW4A(g GPTQInt4) (*W4AWeight, error) {
	fail := func(rule, f string, a ...any) error {
		return &W4AError{Module: g.Name, Rule: rule, Msg: fmt.Sprintf(f, a...)}
	}
	in, out := g.In, g.Out
	if in <= 0 || out <= 0 || in%W4AGroup != 0 {
		return nil, fail("w4a-shape", "input width %d is not a positive multiple of %d", in, W4AGroup)
	}
	if out%32 != 0 {
		return nil, fail("w4a-shape", "output width %d is not a multiple of 32", out)
	}
	groups := in / W4AGroup
	if len(g.QWeight) != in/8*out*4 {
		return nil, fail("w4a-qweight", "qweight holds %d bytes, want %d for [%d, %d] int32", len(g.QWeight), in/8*out*4, in/8, out)
	}
	if len(g.Scales) != groups*out {
		return nil, fail("w4a-scales", "scales hold %d values, want [%d, %d] (group %d)", len(g.Scales), groups, out, W4AGroup)
	}
	if g.Bias != nil && len(g.Bias) != out {
		return nil, fail("w4a-bias", "bias holds %d values for %d outputs", len(g.Bias), out)
	}
	if g.GIdx != nil {
		if len(g.GIdx) != in {
			return nil, fail("w4a-g_idx", "g_idx holds %d entries for %d inputs", len(g.GIdx), in)
		}
		for i, v := range g.GIdx {
			if int(v) != i/W4AGroup {
				return nil, fail("w4a-g_idx", "g_idx[%d] is %d, W4A needs i/128 = %d (desc_act off, no reordering)", i, v, i/W4AGroup)
			}
		}
	}
	if g.QZeros != nil {
		zeros := make([]uint8, groups*out)
		if err := packing.UnpackRowBits(zeros, g.QZeros, groups, out, 4); err != nil {
			return nil, fail("w4a-qzeros", "%v", err)
		}
		for k, z := range zeros {
			zp := int(z)
			if g.V1 {
				zp++ // v1 stores z − 1 (w4a_floatx.py:148 adds the 1 back)
			}
			if zp != 8 {
				return nil, fail("w4a-zero-point", "group %d of output %d has zero point %d; W4A needs symmetric INT4 (zero point 8 in every group)", k/out, k%out, zp)
			}
		}
	}
	w := &W4AWeight{Name: g.Name, In: in, Out: out, Codes: make([]int8, in*out), Scales: make([]float32, groups*out), Bias: g.Bias}
	// qweight word r of column o holds inputs 8r..8r+7, input 8r+k in bits 4k.
	rows := in / 8
	for r := range rows {
		for o := range out {
			word := binary.LittleEndian.Uint32(g.QWeight[4*(r*out+o):])
			for k := range 8 {
				w.Codes[o*in+8*r+k] = int8(word>>(4*k)&15) - 8
			}
		}
	}
	for k := range groups {
		for o := range out {
			w.Scales[o*groups+k] = g.Scales[k*out+o]
		}
	}
	return w, nil
}
