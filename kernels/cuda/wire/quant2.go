package wire

import (
	"fmt"
	"math"
)

// The quantize operations of quant2 (the worker's quant2.go).
const (
	OpQuantFP8       = "quant_fp8"        // parts: f32 weight → fp8 codes, f32 scales
	OpQuantNVFP4GPTQ = "quant_nvfp4_gptq" // parts: f32 weight → packed, e4m3 scales (four_six, least_squares)
	OpQuantNVFP4LH   = "quant_nvfp4_lh"   // parts: f32 weight, f32 activations [T, cols] → packed, e4m3 scales
)

// QuantLHMaxCols bounds a local_hessian weight's input width: its second
// moments (64 bytes an input) travel with every piece of the weight.
const QuantLHMaxCols = 1 << 20

// checkQuant2 validates the quantize operations of quant2: FP8 (any scale
// grid of R×C tiles), GPT-QModel's NVFP4 block recipes and local_hessian.
func checkQuant2(req Request, parts [][]byte, want func(...int64) error, dims func(...int64) error) error {
	switch req.Op {
	case OpQuantFP8:
		if err := dims(req.Rows, req.Cols, req.R, req.C); err != nil {
			return err
		}
		if req.Rows*req.Cols > 1<<40 {
			return fmt.Errorf("%s: %d×%d values is too many", req.Op, req.Rows, req.Cols)
		}
		return want(4 * req.Rows * req.Cols)
	case OpQuantNVFP4GPTQ, OpQuantNVFP4LH:
		if err := dims(req.Rows, req.Cols); err != nil {
			return err
		}
		if req.Cols%16 != 0 || req.Rows*req.Cols > 1<<40 {
			return fmt.Errorf("%s: [%d, %d] is not whole 16-value blocks", req.Op, req.Rows, req.Cols)
		}
		if !(req.Global > 0 && req.Global <= math.MaxFloat32) {
			return fmt.Errorf("%s: global scale %g is not positive and finite", req.Op, req.Global)
		}
		if req.Op == OpQuantNVFP4GPTQ {
			if req.Recipe != "four_six" && req.Recipe != "least_squares" {
				return fmt.Errorf("%s: recipe %q is not four_six or least_squares", req.Op, req.Recipe)
			}
			return want(4 * req.Rows * req.Cols)
		}
		if err := dims(req.T); err != nil {
			return err
		}
		if req.Cols > QuantLHMaxCols || req.T*req.Cols > 1<<40 {
			return fmt.Errorf("%s: %d inputs (at most %d) or %d tokens is too many", req.Op, req.Cols, QuantLHMaxCols, req.T)
		}
		return want(4*req.Rows*req.Cols, 4*req.T*req.Cols)
	}
	return fmt.Errorf("unknown operation %q", req.Op)
}
