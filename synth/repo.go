// Package synth writes small, deterministic checkpoints of every format
// quantscope reads: seeded random weights with outliers, quantized by the
// project's own encoders, stored under the tensor names and configs each
// producer writes (ModelOpt, compressed-tensors, DeepSeek, GPTQ, AWQ,
// gpt-oss). Tests, benchmarks and the demo hub use them; nothing here is
// downloaded, and the same seed always gives the same bytes.
//
// Every repo also keeps the float32 weights it quantized, so a test can
// compare dequantize(quantize(w)) with w.
package synth

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/quantscope/quantscope/formats/safetensors"
)

// Matrix is a float32 weight in its logical shape, row-major.
type Matrix struct {
	Shape []uint64
	Data  []float32
}

// Repo is a generated model repository.
type Repo struct {
	ID    string            // ORG/NAME
	About string            // one line for the demo list
	Files map[string][]byte // path → bytes
	// Weights holds the float weights each quantized (and unquantized) module
	// was made from, by module name.
	Weights map[string]Matrix
	// Formats is the stored format of each module the generator wrote.
	Formats map[string]string
}

// Paths lists the repo's files in a stable order.
func (r *Repo) Paths() []string {
	p := make([]string, 0, len(r.Files))
	for k := range r.Files {
		p = append(p, k)
	}
	slices.Sort(p)
	return p
}

// WriteDir writes the repo's files under dir (dir itself is the repo root).
func (r *Repo) WriteDir(dir string) error {
	for _, p := range r.Paths() {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, r.Files[p], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// builder accumulates a repo's tensors, split into shards.
type builder struct {
	repo    *Repo
	shards  [][]safetensors.WriteTensor
	current int
}

func newBuilder(id, about string, shards int) *builder {
	return &builder{
		repo:   &Repo{ID: id, About: about, Files: map[string][]byte{}, Weights: map[string]Matrix{}, Formats: map[string]string{}},
		shards: make([][]safetensors.WriteTensor, shards),
	}
}

// shard picks the shard later tensors go to.
func (b *builder) shard(i int) { b.current = i }

func (b *builder) add(ts ...safetensors.WriteTensor) {
	b.shards[b.current] = append(b.shards[b.current], ts...)
}

func (b *builder) json(path string, v any) {
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		panic(err) // the generator's own maps always marshal
	}
	b.repo.Files[path] = append(out, '\n')
}

// finish encodes the shards; with more than one it writes the index, whose
// total_size is the data bytes times indexScale (1 for an honest index).
func (b *builder) finish(indexScale int) *Repo {
	if len(b.shards) == 1 {
		b.repo.Files["model.safetensors"] = encode(b.shards[0])
		return b.repo
	}
	weightMap := map[string]string{}
	var total int
	for i, ts := range b.shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(b.shards))
		b.repo.Files[name] = encode(ts)
		for _, t := range ts {
			weightMap[t.Name] = name
			total += len(t.Data)
		}
	}
	b.json("model.safetensors.index.json", map[string]any{
		"metadata":   map[string]any{"total_size": total * indexScale},
		"weight_map": weightMap,
	})
	return b.repo
}

func encode(ts []safetensors.WriteTensor) []byte {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b safetensors.WriteTensor) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	out, err := safetensors.Encode(ts, map[string]string{"format": "pt"})
	if err != nil {
		panic(err) // generator bug: its tensors are well-formed by construction
	}
	return out
}
