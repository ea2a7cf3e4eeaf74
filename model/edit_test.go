package model

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/synth"
)

// repoEdit changes a synthetic one-shard repo: config.json keys set (a nil
// value deletes the key), tensors dropped by name, tensors added.
type repoEdit struct {
	config map[string]any
	drop   func(tensor string) bool
	add    []safetensors.WriteTensor
}

// editRepo returns a copy of repo with the edit made.
func editRepo(t testing.TB, repo *synth.Repo, e repoEdit) *synth.Repo {
	t.Helper()
	out := *repo
	out.Files = maps.Clone(repo.Files)
	if e.config != nil {
		var cfg map[string]any
		if err := json.Unmarshal(repo.Files["config.json"], &cfg); err != nil {
			t.Fatal(err)
		}
		for k, v := range e.config {
			if v == nil {
				delete(cfg, k)
			} else {
				cfg[k] = v
			}
		}
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		out.Files["config.json"] = b
	}
	if e.drop == nil && e.add == nil {
		return &out
	}
	data := repo.Files["model.safetensors"]
	h, err := safetensors.Parse("model.safetensors", data)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.WriteTensor
	for _, x := range h.Tensors {
		if e.drop != nil && e.drop(x.Name) {
			continue
		}
		at := h.DataStart()
		ts = append(ts, safetensors.WriteTensor{Name: x.Name, DType: x.DType, Shape: x.Shape, Data: data[at+int64(x.Begin) : at+int64(x.End)]})
	}
	ts = append(ts, e.add...)
	if out.Files["model.safetensors"], err = safetensors.Encode(ts, h.Metadata); err != nil {
		t.Fatal(err)
	}
	return &out
}

// openRepo writes repo and loads it: New's model or its error.
func openRepo(t testing.TB, repo *synth.Repo) (*Model, error) {
	t.Helper()
	return New(loadRepo(t, repo), cpu.New())
}

// loadRepo writes repo and loads its checkpoint.
func loadRepo(t testing.TB, repo *synth.Repo) *checkpoint.Checkpoint {
	t.Helper()
	dir := t.TempDir()
	if err := repo.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	src, err := hub.OpenLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.Load(context.Background(), src, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// llamaRepo is synth.LlamaRepo, failing the test on error.
func llamaRepo(t testing.TB, s synth.LlamaSpec, w map[string]synth.Matrix, storage string) *synth.Repo {
	t.Helper()
	repo, err := synth.LlamaRepo(s, w, storage)
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// wantErr fails unless err says every one of parts.
func wantErr(t testing.TB, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one saying %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not say %q", err, p)
		}
	}
}
