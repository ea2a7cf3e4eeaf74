package calib

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/model"
)

// LocalHessian is one projection's local_hessian calibration: the output
// MSE on the collected inputs of the NVFP4 weights with ModelOpt's max
// scales and with the local_hessian scales (kernels' recipe: per 16-wide
// input block the 126-code sweep weighted by H_n = Σ x_n x_nᵀ / tokens).
type LocalHessian struct {
	Module          string  `json:"module"`
	Tokens          int     `json:"tokens"`
	MSEMax          float64 `json:"output_mse_max"`
	MSELocalHessian float64 `json:"output_mse_local_hessian"`
}

// LocalHessians runs the local_hessian recipe on every projection with the
// inputs the decoder actually gives it.
func LocalHessians(ctx context.Context, m *model.Model, d *Data, o Options, be kernels.Quantizer) ([]LocalHessian, error) {
	var out []LocalHessian
	err := eachLayerInputs(ctx, m, d, o, func(string) bool { return true }, func(name string, x kernels.Matrix, _ []int) error {
		w, err := weight(m, name)
		if err != nil {
			return err
		}
		r := LocalHessian{Module: name, Tokens: x.Rows}
		for _, recipe := range []string{kernels.RecipeMax, kernels.RecipeLocalHessian} {
			q, err := be.QuantizeNVFP4(ctx, w, kernels.NVFP4Options{Recipe: recipe, Activations: &x}, nil)
			if err != nil {
				return fmt.Errorf("local_hessian: %s: %w", name, err)
			}
			e := outputMSE(x, w, dequantNVFP4(q), []int{x.Rows}) // pooled over every token
			if recipe == kernels.RecipeMax {
				r.MSEMax = e
			} else {
				r.MSELocalHessian = e
			}
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// Inputs returns the inputs the decoder gives one projection over every
// sequence, stacked [tokens, in].
func Inputs(ctx context.Context, m *model.Model, d *Data, o Options, module string) (kernels.Matrix, error) {
	var got kernels.Matrix
	found := false
	err := eachLayerInputs(ctx, m, d, o, func(n string) bool { return n == module }, func(_ string, x kernels.Matrix, _ []int) error {
		found, got = true, x
		return nil
	})
	if err == nil && !found {
		err = fmt.Errorf("local_hessian: --module %q is not a projection of this Llama (model.layers.N.self_attn.q_proj … mlp.down_proj)", module)
	}
	return got, err
}

// F32Bytes is x as little-endian float32, row-major: the --data file of
// `quantize --recipe local_hessian`.
func F32Bytes(x kernels.Matrix) []byte {
	b := make([]byte, 4*len(x.Data))
	for i, v := range x.Data {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// InputsNote is the note written beside module's inputs x (FILE.json, one
// line of InputsMeta) when they are dumped as the --data file of
// `quantize --recipe local_hessian`, so that they are not used for another
// module whose input width happens to divide them.
func InputsNote(module string, x kernels.Matrix) []byte {
	meta, _ := json.Marshal(InputsMeta{Module: module, Tokens: x.Rows, In: x.Cols})
	return append(meta, '\n')
}

// InputsMeta is the note beside an activations file (InputsNote).
type InputsMeta struct {
	Module string `json:"module"`
	Tokens int    `json:"tokens"`
	In     int    `json:"in"`
}
