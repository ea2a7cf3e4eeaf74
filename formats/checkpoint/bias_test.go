package checkpoint

import (
	"strings"
	"testing"

	"github.com/quantscope/quantscope/synth"
)

// A module's parameters are its logical weight elements (the product of
// weight_shape) plus its bias_parameters, and bias_parameters are exactly
// the elements of its bias tensors; the summary's bias_parameters is their
// sum. gpt-oss's experts are the case a newcomer tripped over:
// 8 × 512 × 256 + 8 × 512.
func TestBiasParameters(t *testing.T) {
	for _, r := range synth.All() {
		c := load(t, r)
		inv := c.Inventory()
		bias := map[string]uint64{}
		var total uint64
		for _, te := range inv.Tensors {
			if te.Role == "bias" {
				n := uint64(1)
				for _, d := range te.Shape {
					n *= d
				}
				bias[te.Module] += n
				total += n
			}
		}
		for _, m := range inv.Modules {
			w := uint64(0)
			if m.Format != "none" {
				w = 1
				for _, d := range m.WeightShape {
					w *= d
				}
			}
			if m.BiasParameters != bias[m.Name] || m.Parameters != w+m.BiasParameters {
				t.Errorf("%s %s: parameters %d, bias_parameters %d; weight %v = %d, bias tensors %d",
					r.ID, m.Name, m.Parameters, m.BiasParameters, m.WeightShape, w, bias[m.Name])
			}
		}
		if inv.Summary.BiasParameters != total {
			t.Errorf("%s: summary bias_parameters %d, bias tensors hold %d", r.ID, inv.Summary.BiasParameters, total)
		}
		if strings.Contains(r.ID, "gpt-oss") {
			m, _ := c.Module("model.layers.0.mlp.experts.down_proj")
			if m == nil || m.Parameters != 8*256*512+8*256 || m.BiasParameters != 8*256 {
				t.Errorf("gpt-oss down_proj experts: %+v", m)
			}
		}
	}
}
