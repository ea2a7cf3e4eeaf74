package checkpoint

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/synth"
)

// A compressed-tensors config whose groups overlap, as mixed-precision
// recipes write them (every Linear at 4 bits, down_proj at 8): the module
// takes the group that names it, else the first in the file whose pattern
// matches, before one that targets its class, as compressed-tensors and
// vLLM choose. down_proj decodes as 8-bit, the same values as under a
// config of its own group alone; the 4-bit class group (first by name) had
// it read at 4 bits.
func TestCTGroupNameOverClass(t *testing.T) {
	const down, up = "model.layers.0.mlp.down_proj", "model.layers.0.mlp.up_proj"
	mat := func(seed float64) synth.Matrix {
		m := synth.Matrix{Shape: []uint64{8, 256}, Data: make([]float32, 8*256)}
		for i := range m.Data {
			m.Data[i] = float32(math.Sin(seed*float64(i+1))) * 0.1
		}
		return m
	}
	tensors := append(synth.CTPack(down, mat(0.37), 8, 128, true, packing.CTBitstream), synth.CTPack(up, mat(0.53), 4, 128, true, packing.CTBitstream)...)
	args := func(bits int) string {
		return `{"num_bits":` + map[int]string{4: "4", 8: "8"}[bits] + `,"type":"int","symmetric":true,"strategy":"group","group_size":128}`
	}
	repo := func(groups string, ts []safetensors.WriteTensor) string {
		return ctRepo(t, `{"quant_method":"compressed-tensors","format":"pack-quantized","version":"0.18.0","config_groups":{`+groups+`}}`, ts)
	}
	alone := repo(`"group_0":{"targets":["re:.*down_proj"],"weights":`+args(8)+`}`, []safetensors.WriteTensor(tensors[:3]))
	overlaps := []string{
		// a pattern over a class
		repo(`"group_0":{"targets":["Linear"],"weights":`+args(4)+`},
			"group_1":{"targets":["re:.*down_proj"],"weights":`+args(8)+`}`, tensors),
		// two patterns: the first in the file (group_10 would sort first)
		repo(`"group_2":{"targets":["re:.*down_proj"],"weights":`+args(8)+`},
			"group_10":{"targets":["re:.*mlp.*"],"weights":`+args(4)+`}`, tensors),
		// the module's own name over a pattern written before it
		repo(`"group_0":{"targets":["re:.*mlp.*"],"weights":`+args(4)+`},
			"group_1":{"targets":["model.layers.0.mlp.down_proj"],"weights":`+args(8)+`}`, tensors),
	}
	var want []float32
	for i, dir := range append([]string{alone}, overlaps...) {
		c := loadDir(t, dir, Options{ReadShapeTensors: true})
		m, ok := c.Module(down)
		if !ok || m.Bits != 8 || m.Format != "int8" {
			t.Fatalf("%s: down_proj %+v, want 8-bit", filepath.Base(filepath.Dir(dir)), m)
		}
		v, err := scheme.Dequantize(m, c, 0, 8)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			want = v
		} else {
			for j := range v {
				if math.Float32bits(v[j]) != math.Float32bits(want[j]) {
					t.Fatalf("value %d: %g under the overlapping groups, %g under its own", j, v[j], want[j])
				}
			}
			if u, _ := c.Module(up); u == nil || u.Bits != 4 {
				t.Errorf("up_proj %+v, want the class group's 4 bits", u)
			}
			if len(c.Findings) != 0 {
				t.Errorf("findings %+v", c.Findings)
			}
		}
		c.Close()
	}
}
