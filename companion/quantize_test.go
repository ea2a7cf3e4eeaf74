package main

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/synth"
)

func decodeJSON(t *testing.T, src, name string) []float32 {
	t.Helper()
	stdout, stderr, code := runMain(t, "decode", "--json", src, name)
	var doc struct{ Values []float32 }
	if code != 0 || json.Unmarshal([]byte(stdout), &doc) != nil {
		t.Fatalf("decode %s %s: exit %d %s", src, name, code, stderr)
	}
	return doc.Values
}

func inspectModule(t *testing.T, src, name string) (method string, format string, shape []int) {
	t.Helper()
	stdout, stderr, code := runMain(t, "inspect", "--json", src)
	var inv struct {
		Scheme struct {
			Method     string   `json:"method"`
			DeclaredIn []string `json:"declared_in"`
		}
		Modules []struct {
			Name        string
			Format      string
			WeightShape []int `json:"weight_shape"`
		}
		Findings []struct{ Severity string }
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &inv) != nil {
		t.Fatalf("inspect %s: exit %d %s", src, code, stderr)
	}
	for _, f := range inv.Findings {
		if f.Severity != "info" {
			t.Errorf("%s: finding %+v", src, f)
		}
	}
	for _, m := range inv.Modules {
		if m.Name == name {
			return inv.Scheme.Method, m.Format, m.WeightShape
		}
	}
	t.Fatalf("%s: no module %s", src, name)
	return
}

// TestQuantizeCLI: quantize → inspect → decode through the real binary, for
// every format and naming. An NVFP4 module re-quantized with max gets its own
// codes back (ModelOpt's recipe is idempotent on its output), so decode of
// the written file equals decode of the source exactly.
func TestQuantizeCLI(t *testing.T) {
	dir := demo(t)
	nv := filepath.Join(dir, synth.Org, "Llama-tiny-NVFP4")
	fp8 := filepath.Join(dir, synth.Org, "DeepSeek-tiny-FP8")
	const mod = "model.layers.0.mlp.down_proj"
	tmp := t.TempDir()
	for i, c := range []struct {
		src    string
		args   []string
		method string
		format string
	}{
		{nv, []string{"--format", "nvfp4"}, "modelopt", "nvfp4"},
		{nv, []string{"--format", "nvfp4", "--naming", "compressed-tensors"}, "compressed-tensors", "nvfp4"},
		{fp8, []string{"--format", "fp8_e4m3"}, "fp8", "fp8"},
		{fp8, []string{"--format", "fp8_e5m2", "--scale", "block", "--block", "128,128", "--naming", "modelopt"}, "modelopt", "fp8"},
		{fp8, []string{"--format", "fp8_e4m3", "--scale", "tensor", "--naming", "compressed-tensors"}, "compressed-tensors", "fp8"},
	} {
		out := filepath.Join(tmp, strings.Repeat("q", i+1)+".safetensors")
		args := append(append([]string{"quantize"}, c.args...), "--out", out, c.src, mod)
		stdout, stderr, code := runMain(t, args...)
		if code != 0 || !strings.HasPrefix(stdout, "wrote "+out) || stderr != "" {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", c.args, code, stdout, stderr)
		}
		method, format, shape := inspectModule(t, out, mod)
		_, _, srcShape := inspectModule(t, c.src, mod)
		if method != c.method || format != c.format || shape[0] != srcShape[0] || shape[1] != srcShape[1] {
			t.Fatalf("%v: inspect says %s %s %v", c.args, method, format, shape)
		}
		got, want := decodeJSON(t, out, mod), decodeJSON(t, c.src, mod)
		var se, ss float64
		for k := range want {
			d := float64(got[k] - want[k])
			se, ss = se+d*d, ss+float64(want[k])*float64(want[k])
		}
		if c.format == "nvfp4" && c.method == "modelopt" && se != 0 {
			t.Fatalf("%v: re-quantized NVFP4 max differs from its source (error %g)", c.args, se)
		}
		if sqnr := 10 * math.Log10(ss/max(se, 1e-30)); sqnr < 18 {
			t.Fatalf("%v: read back at %.1f dB SQNR", c.args, sqnr)
		}
	}
}

func TestReportCLI(t *testing.T) {
	src := filepath.Join(demo(t), synth.Org, "DeepSeek-tiny-FP8")
	const mod = "model.layers.0.mlp.down_proj"
	stdout, stderr, code := runMain(t, "report", "--json", src, mod)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct {
		Module  string           `json:"module"`
		Shape   []int            `json:"shape"`
		Recipes []map[string]any `json:"recipes"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || rep.Module != mod || len(rep.Shape) != 2 || len(rep.Recipes) != 4 {
		t.Fatalf("report --json %q: %v", stdout, err)
	}
	var maxMSE float64
	for i, name := range []string{"max", "mse", "four_six", "least_squares"} {
		r := rep.Recipes[i]
		if r["recipe"] != name {
			t.Fatalf("row %d is %v", i, r["recipe"])
		}
		for _, k := range []string{"mse", "sqnr_db", "max_abs_err", "blocks_changed"} {
			if _, ok := r[k].(float64); !ok {
				t.Fatalf("%s.%s = %v", name, k, r[k])
			}
		}
		mse := r["mse"].(float64)
		switch name {
		case "max":
			maxMSE = mse
			if r["blocks_changed"].(float64) != 0 {
				t.Fatal("max differs from itself")
			}
		case "mse":
			if mse > maxMSE || r["blocks_changed"].(float64) == 0 {
				t.Fatalf("mse recipe %v vs max mse %g", r, maxMSE)
			}
		}
	}
	stdout, _, code = runMain(t, "report", src, mod)
	if code != 0 || !strings.Contains(stdout, "least_squares") || !strings.Contains(stdout, "sqnr dB") {
		t.Fatalf("human report %q", stdout)
	}
}

func TestLocalHessianCLI(t *testing.T) {
	src := filepath.Join(demo(t), synth.Org, "DeepSeek-tiny-FP8")
	const mod = "model.layers.0.mlp.down_proj" // in = 512
	_, _, shape := inspectModule(t, src, mod)
	in := shape[1]
	data := filepath.Join(t.TempDir(), "act.f32")
	b := make([]byte, 4*8*in)
	for i := range 8 * in {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(math.Sin(float64(i)))))
	}
	os.WriteFile(data, b, 0o644)
	out := filepath.Join(t.TempDir(), "lh.safetensors")
	if stdout, stderr, code := runMain(t, "quantize", "--format", "nvfp4", "--recipe", "local_hessian", "--data", data, "--out", out, src, mod); code != 0 {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	if _, f, _ := inspectModule(t, out, mod); f != "nvfp4" {
		t.Fatalf("format %s", f)
	}
	stdout, _, code := runMain(t, "report", "--json", "--data", data, src, mod)
	if code != 0 || !strings.Contains(stdout, `"local_hessian"`) {
		t.Fatalf("report with --data: %q", stdout)
	}
	os.WriteFile(data, b[:4*in+4], 0o644) // not a whole number of tokens
	_, stderr, code := runMain(t, "quantize", "--format", "nvfp4", "--recipe", "local_hessian", "--data", data, "--out", out, src, mod)
	if code != 1 || !strings.Contains(stderr, "local-hessian-data") {
		t.Fatalf("ragged --data: exit %d %q", code, stderr)
	}
}

func TestQuantizeBadInput(t *testing.T) {
	dir := demo(t)
	src := filepath.Join(dir, synth.Org, "DeepSeek-tiny-FP8")
	const mod = "model.layers.0.mlp.down_proj"
	out := filepath.Join(t.TempDir(), "x.safetensors")
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"quantize", "--format", "nvfp4", src, mod}, []string{"--out"}},
		{[]string{"quantize", "--format", "nvfp4", "--recipe", "local_hessian", "--out", out, src, mod}, []string{"--data", "float32"}},
		{[]string{"quantize", "--format", "fp8_e4m3", "--block", "5,7", "--out", out, src, mod}, []string{mod, "fp8-block", "does not divide"}},
		{[]string{"quantize", "--format", "fp4", "--out", out, src, mod}, []string{"unknown format"}},
		{[]string{"quantize", "--format", "nvfp4", "--naming", "gptqmodel", "--out", out, src, mod}, []string{"naming"}},
		{[]string{"quantize", "--format", "nvfp4", "--out", out, src, "model.layers.7.nope"}, []string{"model.layers.7.nope"}},
		{[]string{"report", "--format", "fp8", src, mod}, []string{"report-format"}},
	} {
		stdout, stderr, code := runMain(t, c.args...)
		first, _, _ := strings.Cut(stderr, "\n")
		if code != 1 || stdout != "" || !strings.HasPrefix(first, "error: ") {
			t.Errorf("%v: exit %d stdout %q stderr %q", c.args, code, stdout, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(first, w) {
				t.Errorf("%v: error line %q lacks %q", c.args, first, w)
			}
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%v: wrote %s despite the error", c.args, out)
		}
	}
}
