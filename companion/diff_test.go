package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/synth"
)

func keysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// diff --json prints the document the issue specifies; each side's bytes
// and parameters are what inspect --json says of that repo, and the kinds
// add up to them.
func TestDiffJSONContract(t *testing.T) {
	dir := demo(t)
	a, b := filepath.Join(dir, synth.Org, "DeepSeek-mini-FP8"), filepath.Join(dir, synth.Org, "DeepSeek-mini-NVFP4")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"diff", "--json", a, b}, &out, &out); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	dec := json.NewDecoder(&out)
	if err := dec.Decode(&doc); err != nil || dec.More() {
		t.Fatalf("one JSON object: %v", err)
	}
	if got := keysOf(doc); !slices.Equal(got, []string{"a", "b", "changed", "kinds"}) {
		t.Fatalf("keys %v", got)
	}
	for i, side := range []string{"a", "b"} {
		s := doc[side].(map[string]any)
		for _, k := range []string{"source", "bytes", "parameters", "bits_per_weight", "bytes_without_extra_layers", "parameters_without_extra_layers", "bits_per_weight_without_extra_layers"} {
			if _, ok := s[k]; !ok {
				t.Errorf("%s lacks %s", side, k)
			}
		}
		var inv struct {
			Summary struct{ Bytes, Parameters float64 }
		}
		var io bytes.Buffer
		if err := run(context.Background(), []string{"inspect", "--json", []string{a, b}[i]}, &io, &io); err != nil {
			t.Fatal(err)
		}
		json.Unmarshal(io.Bytes(), &inv)
		if s["bytes"] != inv.Summary.Bytes || s["parameters"] != inv.Summary.Parameters || s["source"] != []string{a, b}[i] {
			t.Errorf("%s: %v, inspect says %+v", side, s, inv.Summary)
		}
		var sum float64
		for _, k := range doc["kinds"].([]any) {
			sum += k.(map[string]any)[side+"_bytes"].(float64)
		}
		if sum != s["bytes"] {
			t.Errorf("%s: kinds sum to %v bytes of %v", side, sum, s["bytes"])
		}
	}
	kinds := doc["kinds"].([]any)
	want := []string{"a_bytes", "a_formats", "a_parameters", "b_bytes", "b_formats", "b_parameters", "kind"}
	for _, k := range kinds {
		if got := keysOf(k.(map[string]any)); !slices.Equal(got, want) {
			t.Errorf("kind keys %v", got)
		}
	}
	if k := kinds[0].(map[string]any); k["kind"] != "routed_experts" || k["a_formats"].(map[string]any)["fp8"] != k["a_bytes"] || k["b_formats"].(map[string]any)["nvfp4"] != k["b_bytes"] {
		t.Errorf("routed experts: %v", k)
	}
	sawPattern := false
	for _, c := range doc["changed"].([]any) {
		m := c.(map[string]any)
		got := keysOf(m)
		if _, ok := m["count"]; ok {
			sawPattern = true
			if !slices.Equal(got, []string{"a_format", "b_format", "count", "module"}) || !strings.Contains(m["module"].(string), "*") {
				t.Errorf("pattern entry %v", m)
			}
		} else if !slices.Equal(got, []string{"a_format", "b_format", "module"}) {
			t.Errorf("changed entry %v", m)
		}
	}
	if !sawPattern {
		t.Error("228 changed modules are not summarised by pattern")
	}
}

// Over the local hub, both repos read remotely: the table and the changes
// as a person reads them.
func TestDiffHuman(t *testing.T) {
	dir := demo(t)
	url := startMain(t, "hub", "--addr", "127.0.0.1:0", dir)
	out, stderr, code := runMain(t, "diff", "--endpoint", url, synth.Org+"/DeepSeek-mini-FP8", synth.Org+"/DeepSeek-mini-NVFP4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"A  " + synth.Org + "/DeepSeek-mini-FP8",
		"routed_experts     983.0 K      0.98  8.00      0.55  4.51     -0.43   0.56×",
		"    fp8 0.98 → nvfp4 0.55",
		"attention          101.4 K      0.10  8.02      0.20 16.00     +0.10   2.00×",
		"    fp8 0.10 → bf16 0.20",
		"extra_layers",
		"without extra",
		"228 module(s) changed their stored format:",
		"    model.layers.*.self_attn.q_a_proj             fp8 → bf16   × 12\n",
		"    model.layers.0.mlp.gate_proj                  fp8 → nvfp4\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("diff output lacks %q:\n%s", want, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if n := len([]rune(l)); n > 100 {
			t.Errorf("line of %d columns: %q", n, l)
		}
	}
	// inspect writes sizes in the same decimal units: B's 1.40 MB is
	// inspect's 1.4 MB, not 1.3 MiB.
	if !strings.Contains(out, "   1.40 MB, 1.62 M parameters") {
		t.Errorf("diff's B total is not 1.40 MB:\n%s", out)
	}
	ins, stderr, code := runMain(t, "inspect", "--endpoint", url, synth.Org+"/DeepSeek-mini-NVFP4")
	if code != 0 || !strings.Contains(ins, " 1.4 MB of tensor data (+86.3 kB of headers)") {
		t.Errorf("inspect (exit %d, %s) does not say diff's size in decimal units:\n%s", code, stderr, ins)
	}
}

// Where the two repos' parameters differ, the total row says both: each
// side's bits per weight is over its own parameters, and the one column
// shows the larger.
func TestDiffTotalParameters(t *testing.T) {
	dir := demo(t)
	out, stderr, code := runMain(t, "diff", filepath.Join(dir, synth.Org, "Llama-tiny-NVFP4"), filepath.Join(dir, synth.Org, "gpt-oss-tiny-MXFP4"))
	if code != 0 || !regexp.MustCompile(`\n  total +6\.84 M .*\n    \(parameters 1\.71 M → 6\.84 M\)\n`).MatchString(out) {
		t.Errorf("exit %d, %s:\n%s", code, stderr, out)
	}
}

func TestDiffBadInput(t *testing.T) {
	dir := demo(t)
	a := filepath.Join(dir, synth.Org, "DeepSeek-mini-FP8")
	if err := writeBroken(filepath.Join(dir, synth.Org, "broken-header")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"diff", a}, "SOURCE_A SOURCE_B"},
		{[]string{"diff", a, filepath.Join(dir, "no-such-repo")}, "no-such-repo"},
		{[]string{"diff", filepath.Join(dir, "no-such-repo"), a}, "no-such-repo"},
		// a broken shard's error says which of the two repos holds it
		{[]string{"diff", a, filepath.Join(dir, synth.Org, "broken-header")}, filepath.Join(dir, synth.Org, "broken-header") + ": model.safetensors: tensor \"model.norm.weight\": rule contiguous"},
		// one file: the path as given, once
		{[]string{"inspect", filepath.Join(dir, synth.Org, "broken-header", "model.safetensors")}, "error: " + filepath.Join(dir, synth.Org, "broken-header", "model.safetensors") + ": tensor \"model.norm.weight\""},
	} {
		stdout, stderr, code := runMain(t, c.args...)
		first, _, _ := strings.Cut(stderr, "\n")
		if code != 1 || stdout != "" || !strings.HasPrefix(first, "error: ") || !strings.Contains(first, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", c.args, code, stdout, stderr)
		}
	}
}

// inspect's layer map: runs of layers stored alike folded, the MTP layer
// marked extra, under the summary and inside 100 columns.
func TestInspectLayerMap(t *testing.T) {
	dir := demo(t)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"inspect", filepath.Join(dir, synth.Org, "DeepSeek-mini-NVFP4")}, &out, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"                   q    kv   o    gate  up    down  router shared experts norm embed head other\n",
		"  embedding                                                                    bf16\n",
		"  layer 0          bf16 bf16 bf16 nvfp4 nvfp4 nvfp4                       bf16\n",
		"  layers 1–10      bf16 bf16 bf16                   bf16+  nvfp4  nvfp4   bf16\n",
		"  layer 11 (extra) bf16 bf16 bf16                   bf16+  bf16   bf16    bf16 bf16  bf16 bf16\n",
		"  head                                                                    bf16       bf16\n",
		"  mixed: layers 1–10 router: bf16 98.5% + f32 1.5% (of the bytes)\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("inspect lacks %q:\n%s", want, s)
		}
	}
	if strings.Index(s, "layer map") < strings.Index(s, "bytes by dtype") {
		t.Error("the layer map is not under the summary")
	}
	for _, l := range strings.Split(s, "\n") {
		if n := len([]rune(l)); n > 100 && !strings.HasPrefix(l, "  scheme:") {
			t.Errorf("line of %d columns: %q", n, l)
		}
	}
}
