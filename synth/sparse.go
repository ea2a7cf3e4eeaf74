package synth

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	st "github.com/quantscope/quantscope/formats/safetensors"
)

// WriteDeepSeekR1FP4Shape writes, under dir, a repo shaped like
// nvidia/DeepSeek-R1-FP4: shards of 2,300 NVFP4 expert tensors each as
// ModelOpt exports them (weight, weight_scale, weight_scale_2, input_scale),
// with the index and configs. The headers are real; the data are sparse
// (the files are truncated to size, nothing is written), so 80 shards of a
// few GB each take a few MB of disk. It returns the header and JSON bytes.
func WriteDeepSeekR1FP4Shape(dir string, shards int) (headerBytes, jsonBytes int64, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	const hidden, inter = 7168, 2048
	weightMap := map[string]string{}
	var total uint64
	for s := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		var entries []st.Entry
		const linearsPerShard = 575 // 2,300 tensors: weight, weight_scale, weight_scale_2, input_scale each
		for k := range linearsPerShard {
			g := s*linearsPerShard + k // 256 experts × 3 projections a layer, from layer 3 as in DeepSeek-R1
			layer, expert := 3+g/768, (g%768)/3
			p := []struct {
				proj    string
				out, in uint64
			}{{"gate_proj", inter, hidden}, {"up_proj", inter, hidden}, {"down_proj", hidden, inter}}[g%3]
			pre := fmt.Sprintf("model.layers.%d.mlp.experts.%d.%s.", layer, expert, p.proj)
			entries = append(entries,
				st.Entry{Name: pre + "weight", DType: st.U8, Shape: []uint64{p.out, p.in / 2}, NBytes: p.out * p.in / 2},
				st.Entry{Name: pre + "weight_scale", DType: st.F8_E4M3, Shape: []uint64{p.out, p.in / 16}, NBytes: p.out * p.in / 16},
				st.Entry{Name: pre + "weight_scale_2", DType: st.F32, Shape: []uint64{}, NBytes: 4},
				st.Entry{Name: pre + "input_scale", DType: st.F32, Shape: []uint64{}, NBytes: 4})
		}
		hdr, n, err := st.EncodeHeader(entries, map[string]string{"format": "pt"})
		if err != nil {
			return 0, 0, err
		}
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return 0, 0, err
		}
		if _, err := f.Write(hdr); err != nil {
			return 0, 0, err
		}
		if err := f.Truncate(int64(len(hdr)) + int64(n)); err != nil { // sparse: no data written
			return 0, 0, err
		}
		f.Close()
		headerBytes += int64(len(hdr))
		total += n
		for _, e := range entries {
			weightMap[e.Name] = name
		}
	}
	files := map[string]any{
		"model.safetensors.index.json": map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap},
		"config.json": map[string]any{"architectures": []string{"DeepseekV3ForCausalLM"}, "model_type": "deepseek_v3",
			"quantization_config": map[string]any{"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}},
		"hf_quant_config.json": map[string]any{"producer": map[string]any{"name": "modelopt", "version": "0.23.0"},
			"quantization": map[string]any{"quant_algo": "NVFP4", "kv_cache_quant_algo": nil, "group_size": 16, "exclude_modules": []string{"lm_head"}}},
	}
	for p, v := range files {
		b, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(dir, p), b, 0o644); err != nil {
			return 0, 0, err
		}
		jsonBytes += int64(len(b))
	}
	return headerBytes, jsonBytes, nil
}
