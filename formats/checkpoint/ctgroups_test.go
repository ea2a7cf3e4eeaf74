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
// takes the group that names it over the one that targets its class, as
// compressed-tensors and vLLM both choose. down_proj decodes as 8-bit, the
// same values as under a config of its own group alone; the 4-bit class
// group (first by name) had it read at 4 bits.
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
	overlap := ctRepo(t, `{"quant_method":"compressed-tensors","format":"pack-quantized","version":"0.18.0","config_groups":{
		"group_0":{"targets":["Linear"],"weights":`+args(4)+`},
		"group_1":{"targets":["re:.*down_proj"],"weights":`+args(8)+`}}}`, tensors)
	alone := ctRepo(t, `{"quant_method":"compressed-tensors","format":"pack-quantized","version":"0.18.0","config_groups":{
		"group_0":{"targets":["re:.*down_proj"],"weights":`+args(8)+`}}}`, []safetensors.WriteTensor(tensors[:3]))
	var want []float32
	for i, dir := range []string{alone, overlap} {
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
