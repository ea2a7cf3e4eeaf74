package synth

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	st "github.com/quantscope/quantscope/formats/safetensors"
)

// Llama70BShape is Llama 3.1 70B's shape (hidden 8192, MLP 28672, 64 heads
// over 8 KV heads, vocabulary 128256, llama3 RoPE) with the given number of
// decoder layers (80 in the real model; a forward's peak memory does not
// depend on it, only its time does).
func Llama70BShape(layers int) LlamaSpec {
	return LlamaSpec{ID: Org + "/Llama-70B-shape", Layers: layers, Hidden: 8192, Inter: 28672, Heads: 64, KVHeads: 8, Vocab: 128256, Llama3Scaling: true, MaxPosition: 131072}
}

// WriteLlamaSparse writes under dir a checkpoint of spec's shape whose
// headers are real and whose weights are sparse (files truncated to size,
// zeros when read): storage "bf16", or "gptq" (symmetric INT4 group 128,
// whose zero points and g_idx are written for real so that --w4a accepts
// it). Norm weights are written as ones. One shard holds a few layers; the
// index lists them all. Nothing of the weights' size is written to disk.
func WriteLlamaSparse(dir string, s LlamaSpec, storage string) error {
	if storage != "bf16" && storage != "gptq" {
		return fmt.Errorf("synth: sparse storage %q: want bf16 or gptq", storage)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	type tensor struct {
		e    st.Entry
		fill func() []byte // nil: left sparse
	}
	ones := func(n int) func() []byte {
		return func() []byte {
			b := make([]byte, 2*n)
			for i := range n {
				binary.LittleEndian.PutUint16(b[2*i:], 0x3f80) // BF16 1.0
			}
			return b
		}
	}
	bf16 := func(name string, shape ...uint64) tensor {
		n := uint64(2)
		for _, d := range shape {
			n *= d
		}
		return tensor{e: st.Entry{Name: name, DType: st.BF16, Shape: shape, NBytes: n}}
	}
	linear := func(name string, out, in int) []tensor {
		if storage == "bf16" {
			return []tensor{bf16(name+".weight", uint64(out), uint64(in))}
		}
		g := in / 128
		zeros := func() []byte {
			b := make([]byte, 4*g*out/8)
			for i := 0; i < len(b); i += 4 {
				binary.LittleEndian.PutUint32(b[i:], 0x77777777) // v1: zero point 8 stored as 7
			}
			return b
		}
		gidx := func() []byte {
			b := make([]byte, 4*in)
			for i := range in {
				binary.LittleEndian.PutUint32(b[4*i:], uint32(i/128))
			}
			return b
		}
		return []tensor{
			{e: st.Entry{Name: name + ".qweight", DType: st.I32, Shape: []uint64{uint64(in / 8), uint64(out)}, NBytes: uint64(in / 8 * out * 4)}},
			{e: st.Entry{Name: name + ".qzeros", DType: st.I32, Shape: []uint64{uint64(g), uint64(out / 8)}, NBytes: uint64(g * out / 8 * 4)}, fill: zeros},
			{e: st.Entry{Name: name + ".scales", DType: st.F16, Shape: []uint64{uint64(g), uint64(out)}, NBytes: uint64(g * out * 2)}},
			{e: st.Entry{Name: name + ".g_idx", DType: st.I32, Shape: []uint64{uint64(in)}, NBytes: uint64(4 * in)}, fill: gidx},
		}
	}
	const layersPerShard = 4
	shards := [][]tensor{{bf16("model.embed_tokens.weight", uint64(s.Vocab), uint64(s.Hidden))}}
	for l := range s.Layers {
		if l%layersPerShard == 0 && l > 0 {
			shards = append(shards, nil)
		}
		p := fmt.Sprintf("model.layers.%d.", l)
		cur := &shards[len(shards)-1]
		for _, n := range []string{"input_layernorm", "post_attention_layernorm"} {
			t := bf16(p+n+".weight", uint64(s.Hidden))
			t.fill = ones(s.Hidden)
			*cur = append(*cur, t)
		}
		for _, lin := range llamaLinears(s) {
			*cur = append(*cur, linear(p+lin.name, lin.out, lin.in)...)
		}
	}
	norm := bf16("model.norm.weight", uint64(s.Hidden))
	norm.fill = ones(s.Hidden)
	last := []tensor{norm}
	if !s.Tied {
		last = append(last, bf16("lm_head.weight", uint64(s.Vocab), uint64(s.Hidden)))
	}
	shards = append(shards, last)
	weightMap := map[string]string{}
	var total uint64
	for i, ts := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		entries := make([]st.Entry, len(ts))
		for k, t := range ts {
			entries[k] = t.e
			weightMap[t.e.Name] = name
		}
		hdr, n, err := st.EncodeHeader(entries, map[string]string{"format": "pt"})
		if err != nil {
			return err
		}
		if err := writeSparse(filepath.Join(dir, name), hdr, n, func(f *os.File) error {
			off := int64(len(hdr))
			for _, t := range ts {
				if t.fill != nil {
					if _, err := f.WriteAt(t.fill(), off); err != nil {
						return err
					}
				}
				off += int64(t.e.NBytes)
			}
			return nil
		}); err != nil {
			return err
		}
		total += n
	}
	dtype := "bfloat16"
	var qc map[string]any
	if storage == "gptq" {
		dtype = "float16"
		qc = map[string]any{"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": true, "desc_act": false, "checkpoint_format": "gptq"}
	}
	files := map[string]any{
		"model.safetensors.index.json": map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap},
		"config.json":                  LlamaConfig(s, dtype, qc),
	}
	for p, v := range files {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, p), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
