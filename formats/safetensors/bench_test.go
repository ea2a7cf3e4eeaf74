package safetensors

import (
	"fmt"
	"testing"
)

// deepseekShard builds a header shaped like one nvidia/DeepSeek-R1-FP4 shard:
// about 2,300 tensors of NVFP4 experts with their scales. Only the header is
// materialised; the data section is described, not allocated.
func deepseekShard(tensors int) []byte {
	var ws []WriteTensor
	for i := 0; len(ws) < tensors; i++ {
		layer, expert := 3+i/64, i%64
		for _, proj := range []string{"gate_proj", "up_proj", "down_proj"} {
			p := fmt.Sprintf("model.layers.%d.mlp.experts.%d.%s.", layer, expert, proj)
			ws = append(ws,
				WriteTensor{Name: p + "weight", DType: U8, Shape: []uint64{4, 2}, Data: make([]byte, 8)},
				WriteTensor{Name: p + "weight_scale", DType: F8_E4M3, Shape: []uint64{4, 1}, Data: make([]byte, 4)},
				WriteTensor{Name: p + "weight_scale_2", DType: F32, Shape: []uint64{}, Data: make([]byte, 4)},
				WriteTensor{Name: p + "input_scale", DType: F32, Shape: []uint64{}, Data: make([]byte, 4)})
		}
	}
	b, err := Encode(ws[:tensors], map[string]string{"format": "pt"})
	if err != nil {
		panic(err)
	}
	return b
}

// BenchmarkParseDeepSeekShard measures parse time of a 2,300-tensor header;
// bytes/s is header bytes parsed per second.
func BenchmarkParseDeepSeekShard(b *testing.B) {
	file := deepseekShard(2300)
	h, err := Parse("shard", file)
	if err != nil {
		b.Fatal(err)
	}
	js := file[:h.DataStart()]
	b.SetBytes(int64(len(js)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParsePrefix("shard", js, int64(len(file))); err != nil {
			b.Fatal(err)
		}
	}
}
