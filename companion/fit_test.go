package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/synth"
)

func writeRepo(t *testing.T, r *synth.Repo) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), filepath.FromSlash(r.ID))
	if err := r.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestFitJSONContract: the keys scripts read, with numbers worked out from
// the generated DeepSeek-shaped repo's config (formats/fit checks every byte).
func TestFitJSONContract(t *testing.T) {
	dir := writeRepo(t, synth.FitDeepSeekMTP())
	var out bytes.Buffer
	if err := run(context.Background(), []string{"fit", "--json", "--tp", "2", "--context", "1000", "--batch", "2", "--mtp",
		"--gpu", "H100", "--gpu", "rtx-4090", "--gpu", "tiny:0.001", dir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"weights_bytes", "per_gpu_weight_bytes", "kv_dtype", "kv_bytes_per_token", "kv_bytes", "context", "batch", "tp", "assumptions", "gpus"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("no %q in %s", k, out.String())
		}
	}
	d := synth.FitDeepSeekDims
	latent := (d.KVLora + d.Rope) * 2 // BF16 latent a layer a token
	layers := d.Layers + 1            // --mtp
	if doc["kv_dtype"] != "bf16" || doc["kv_bytes_per_token"] != float64(layers*latent) || doc["kv_bytes"] != float64(layers*latent*1000*2) ||
		doc["context"] != 1000.0 || doc["batch"] != 2.0 || doc["tp"] != 2.0 {
		t.Errorf("kv/context fields: %v %v %v %v %v %v", doc["kv_dtype"], doc["kv_bytes_per_token"], doc["kv_bytes"], doc["context"], doc["batch"], doc["tp"])
	}
	gpus := doc["gpus"].([]any)
	want := []struct {
		name  string
		mem   float64
		count float64
		fits  bool
	}{{"H100", 80e9, 1, true}, {"RTX 4090", 24e9, 1, true}, {"tiny", 1e6, 0, false}}
	if len(gpus) != len(want) {
		t.Fatalf("gpus %v", gpus)
	}
	for i, w := range want {
		g := gpus[i].(map[string]any)
		if g["name"] != w.name || g["memory_bytes"] != w.mem || g["count"] != w.count || g["fits"] != w.fits || g["max_context"] == nil {
			t.Errorf("gpu %d: %v, want %+v", i, g, w)
		}
	}
}

func TestFitHuman(t *testing.T) {
	dir := writeRepo(t, synth.FitGPTOSSSliding())
	var out bytes.Buffer
	if err := run(context.Background(), []string{"fit", dir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"KV cache  GQA, bf16, 4 layers: 1.0 kB a token (2 layers capped at 128 tokens); 32768 tokens × 1",
		"RTX 5090", "fits tp 1", "max context", "assumptions:", "- 2 of 4 decoder layers attend over a sliding window of 128 tokens"} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in\n%s", want, s)
		}
	}
	// vLLM's spellings: 128k tokens, fp8_e4m3
	out.Reset()
	if err := run(context.Background(), []string{"fit", "--json", "--context", "16k", "--kv-dtype", "fp8_e4m3", dir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	var j struct {
		Context int    `json:"context"`
		KV      string `json:"kv_dtype"`
	}
	if err := json.Unmarshal(out.Bytes(), &j); err != nil || j.Context != 16384 || j.KV != "fp8" {
		t.Errorf("--context 16k --kv-dtype fp8_e4m3: %+v %v", j, err)
	}
	// a context past max_position_embeddings fits on no GPU, and says why
	out.Reset()
	if err := run(context.Background(), []string{"fit", "--context", "1000000", dir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "context 1000000 cannot be served: it is past max_position_embeddings") || !regexp.MustCompile(`\n  H100 .* no \(context\) +— `).MatchString(s) || strings.Contains(s, " yes ") {
		t.Errorf("a context past the model's:\n%s", s)
	}
}

func TestFitBadInput(t *testing.T) {
	gqa := writeRepo(t, synth.FitLlamaGQA())
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fit", "--tp", "0", gqa}, "--tp 0"},
		{[]string{"fit", "--gpu", "A100", gqa}, `--gpu "A100": not in the catalog`},
		{[]string{"fit", "--gpu", "X:0", gqa}, `--gpu "X:0"`},
		{[]string{"fit", "--reserve", "lots", gqa}, `--reserve "lots"`},
		{[]string{"fit", "--w4a", "fp8", gqa}, "no module W4A can run"},
		{[]string{"fit", "--mtp", gqa}, "--mtp: rule fit-mtp"},
		{[]string{"fit"}, "fit wants SOURCE"},
	} {
		stdout, stderr, code := runMain(t, c.args...)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if code != 1 || stdout != "" || !strings.HasPrefix(lines[0], "error: ") || !strings.Contains(lines[0], c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and error naming %q", c.args, code, stdout, stderr, c.want)
		}
	}
}
