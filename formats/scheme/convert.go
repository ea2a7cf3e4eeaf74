package scheme

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/safetensors"
)

// Rename is one tensor of the ModelOpt → compressed-tensors conversion.
type Rename struct {
	From, To string
	Invert   bool // the values become 1/x (weight_scale_2, input_scale)
}

// ModelOptToCT lists the renames that turn ModelOpt NVFP4 modules into
// compressed-tensors nvfp4-pack-quantized names (CT-005): weight →
// weight_packed with the same bytes (no nibble swap), weight_scale kept,
// weight_scale_2 → weight_global_scale and input_scale → input_global_scale,
// both inverted. Tensors of other modules are left as they are.
func ModelOptToCT(mods []*Module) []Rename {
	var out []Rename
	for _, m := range mods {
		if m.Format != FormatNVFP4 || m.Layout != LayoutModelOpt {
			continue
		}
		for role, name := range m.Tensors() {
			switch role {
			case "weight":
				out = append(out, Rename{From: name, To: m.Name + ".weight_packed"})
			case "weight_scale_2":
				out = append(out, Rename{From: name, To: m.Name + ".weight_global_scale", Invert: true})
			case "input_scale":
				out = append(out, Rename{From: name, To: m.Name + ".input_global_scale", Invert: true})
			}
		}
	}
	return out
}

// RenamedView is a checkpoint seen through a list of renames: its tensors
// carry the new names and inverted values, read lazily from the original.
type RenamedView struct {
	Tensors []TensorInfo
	base    TensorReader
	from    map[string]Rename // new name → rename
	infos   map[string]*TensorInfo
}

// NewRenamedView applies renames to a tensor list over its reader.
func NewRenamedView(tensors []TensorInfo, r TensorReader, renames []Rename) *RenamedView {
	byFrom := map[string]Rename{}
	for _, rn := range renames {
		byFrom[rn.From] = rn
	}
	v := &RenamedView{base: r, from: map[string]Rename{}, infos: map[string]*TensorInfo{}}
	for _, t := range tensors {
		if rn, ok := byFrom[t.Name]; ok {
			v.from[rn.To] = rn
			t.Name = rn.To
		}
		v.Tensors = append(v.Tensors, t)
	}
	for i := range v.Tensors {
		v.infos[v.Tensors[i].Name] = &v.Tensors[i]
	}
	return v
}

// ReadTensor serves renamed tensors, inverting values where the rename says so.
func (v *RenamedView) ReadTensor(name string, off, n int64) ([]byte, error) {
	rn, ok := v.from[name]
	if !ok {
		return v.base.ReadTensor(name, off, n)
	}
	if !rn.Invert {
		return v.base.ReadTensor(rn.From, off, n)
	}
	t := v.infos[name]
	all, err := v.base.ReadTensor(rn.From, 0, int64(t.NBytes))
	if err != nil {
		return nil, err
	}
	inv, err := invertFloats(t.DType, all)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", rn.From, err)
	}
	if off < 0 || off+n > int64(len(inv)) {
		return nil, fmt.Errorf("tensor %q: read [%d, %d) outside its %d bytes", name, off, off+n, len(inv))
	}
	return inv[off : off+n], nil
}

func invertFloats(d safetensors.DType, b []byte) ([]byte, error) {
	out := make([]byte, len(b))
	switch d {
	case safetensors.F32:
		for i := 0; i+4 <= len(b); i += 4 {
			x := math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))
			binary.LittleEndian.PutUint32(out[i:], math.Float32bits(1/x))
		}
	case safetensors.BF16:
		for i := 0; i+2 <= len(b); i += 2 {
			x := numeric.BF16ToFloat32(binary.LittleEndian.Uint16(b[i:]))
			binary.LittleEndian.PutUint16(out[i:], numeric.Float32ToBF16(1/x))
		}
	case safetensors.F16:
		for i := 0; i+2 <= len(b); i += 2 {
			x := numeric.F16ToFloat32(binary.LittleEndian.Uint16(b[i:]))
			binary.LittleEndian.PutUint16(out[i:], numeric.Float32ToF16(1/x))
		}
	default:
		return nil, fmt.Errorf("cannot invert a %s scale", d)
	}
	return out, nil
}
