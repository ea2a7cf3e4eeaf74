package scheme

import (
	"encoding/json"
	"testing"

	"github.com/quantscope/quantscope/formats/safetensors"
)

// moduleDoc is a module as the inventory documents it, written out field by
// field so that encoding/json's reflection is the reference for AppendJSON
// (and MarshalJSON, which uses it).
type moduleDoc struct {
	Name           string            `json:"name"`
	Kind           string            `json:"kind"`
	Format         string            `json:"format"`
	Layout         string            `json:"layout"`
	Bits           int               `json:"bits,omitempty"`
	GroupSize      int               `json:"group_size,omitempty"`
	Block          []int             `json:"block,omitempty"`
	WeightShape    []uint64          `json:"weight_shape"`
	ShapeInferred  bool              `json:"shape_inferred,omitempty"`
	Parameters     uint64            `json:"parameters"`
	BiasParameters uint64            `json:"bias_parameters"`
	Bytes          uint64            `json:"bytes"`
	Quantized      bool              `json:"quantized"`
	Symmetric      bool              `json:"symmetric,omitempty"`
	Tensors        map[string]string `json:"tensors"`
	InverseScale   bool              `json:"inverse_scale,omitempty"`
}

type moduleDocNoTensors struct {
	Name           string   `json:"name"`
	Kind           string   `json:"kind"`
	Format         string   `json:"format"`
	Layout         string   `json:"layout"`
	Bits           int      `json:"bits,omitempty"`
	GroupSize      int      `json:"group_size,omitempty"`
	Block          []int    `json:"block,omitempty"`
	WeightShape    []uint64 `json:"weight_shape"`
	ShapeInferred  bool     `json:"shape_inferred,omitempty"`
	Parameters     uint64   `json:"parameters"`
	BiasParameters uint64   `json:"bias_parameters"`
	Bytes          uint64   `json:"bytes"`
	Quantized      bool     `json:"quantized"`
	Symmetric      bool     `json:"symmetric,omitempty"`
	InverseScale   bool     `json:"inverse_scale,omitempty"`
}

// TestModuleJSON: every module Group makes encodes as the documented
// object, its role → tensor map included, whatever its names hold.
func TestModuleJSON(t *testing.T) {
	ti := func(name string, d safetensors.DType, shape ...uint64) TensorInfo {
		n := d.Bits() / 8
		for _, s := range shape {
			n *= s
		}
		return TensorInfo{Name: name, DType: d, Shape: shape, NBytes: n}
	}
	tensors := []TensorInfo{
		ti("model.layers.0.mlp.down_proj.weight", safetensors.U8, 8, 16),
		ti("model.layers.0.mlp.down_proj.weight_scale", safetensors.F8_E4M3, 8, 2),
		ti("model.layers.0.mlp.down_proj.weight_scale_2", safetensors.F32),
		ti("model.layers.0.mlp.down_proj.input_scale", safetensors.F32),
		ti("model.layers.0.self_attn.q_proj.weight", safetensors.F8_E4M3, 256, 256),
		ti("model.layers.0.self_attn.q_proj.weight_scale_inv", safetensors.F32, 2, 2),
		ti("model.layers.0.self_attn.q_proj.bias", safetensors.BF16, 256),
		ti("odd <\"name\"> & é\u2028.weight", safetensors.BF16, 4, 4),
		ti("odd <\"name\"> & é\u2028.weight_scale", safetensors.F32, 1),
		ti("lm_head.weight", safetensors.BF16, 32, 8),
		ti("model.norm.weight", safetensors.F32, 8),
		ti("model.layers.1.mlp.experts.gate_up_proj_blocks", safetensors.U8, 4, 8, 2, 16),
		ti("model.layers.1.mlp.experts.gate_up_proj_scales", safetensors.U8, 4, 8, 2),
		ti("model.layers.1.mlp.experts.gate_up_proj_bias", safetensors.BF16, 4, 8),
		ti("model.layers.2.mlp.up_proj.qweight", safetensors.I32, 8, 64),
		ti("model.layers.2.mlp.up_proj.scales", safetensors.F16, 1, 64),
		ti("model.layers.2.mlp.up_proj.qzeros", safetensors.I32, 1, 8),
		ti("lonely", safetensors.F32, 3),
	}
	mods := Group(tensors, &Scheme{Method: "none", Family: FamilyNone}, nil)
	if len(mods) < 8 {
		t.Fatalf("%d modules", len(mods))
	}
	for _, m := range mods {
		names := map[string]string{}
		for i := range tensors {
			if tensors[i].Module == m.Name {
				names[tensors[i].Role] = tensors[i].Name
			}
		}
		doc := moduleDoc{m.Name, m.Kind, m.Format, m.Layout, m.Bits, m.GroupSize, m.Block, m.WeightShape, m.ShapeInferred,
			m.Parameters, m.BiasParameters, m.Bytes, m.Quantized, m.Symmetric, names, m.InverseScale}
		want, _ := json.Marshal(doc)
		if got := m.AppendJSON(nil, true); string(got) != string(want) {
			t.Errorf("AppendJSON\n%s\nencoding/json\n%s", got, want)
		}
		if got, err := json.Marshal(m); err != nil || string(got) != string(want) {
			t.Errorf("json.Marshal(module) %s, %v\nwant %s", got, err, want)
		}
		want, _ = json.Marshal(moduleDocNoTensors{m.Name, m.Kind, m.Format, m.Layout, m.Bits, m.GroupSize, m.Block, m.WeightShape,
			m.ShapeInferred, m.Parameters, m.BiasParameters, m.Bytes, m.Quantized, m.Symmetric, m.InverseScale})
		if got := m.AppendJSON(nil, false); string(got) != string(want) {
			t.Errorf("AppendJSON without tensors\n%s\nencoding/json\n%s", got, want)
		}
		if len(m.Tensors()) != len(names) {
			t.Errorf("%s: Tensors() %v, the tensors grouped into it %v", m.Name, m.Tensors(), names)
		}
		for role, name := range names {
			if got, ok := m.Tensor(role); !ok || got != name {
				t.Errorf("%s: Tensor(%q) = %q, %v; want %q", m.Name, role, got, ok, name)
			}
		}
	}
	if got := (&Module{Name: "bare"}).AppendJSON(nil, true); string(got) != `{"name":"bare","kind":"","format":"","layout":"","weight_shape":null,"parameters":0,"bias_parameters":0,"bytes":0,"quantized":false,"tensors":null}` {
		t.Errorf("a Module not made by Group: %s", got)
	}
}
