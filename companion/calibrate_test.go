package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func runArgs(args ...string) (string, string, error) {
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), err
}

// The calibrate → forward/eval round trip on the command line: the act_max
// report written with --out, read back by forward --scales; eval refusing
// the calibration file without --allow-overlap.
func TestCalibrateCLI(t *testing.T) {
	gptq, _ := llamaRepos(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "calib.txt")
	held := filepath.Join(dir, "held.txt")
	os.WriteFile(data, []byte("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42\n"), 0o644)
	os.WriteFile(held, []byte("5 9 100 7 3\n"), 0o644)
	report := filepath.Join(dir, "scales.json")
	out, _, err := runArgs("calibrate", "--pass", "act_max", "--w4a", "nvfp4", "--recipe", "nvidia", "--data", data, "--json", "--out", report, gptq)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, `{"algorithm":"producer_maximum","recipe":"nvidia","global_scales":{"model.layers.0.input":`) || !strings.Contains(out, `"model.layers.1.output":{"amax":`) || !strings.Contains(out, `"tokens":40,"samples":2}`) {
		t.Fatalf("act_max report: %s", out)
	}
	if b, _ := os.ReadFile(report); string(b) != out {
		t.Fatal("--out differs from --json")
	}
	fw, errs, err := runArgs("forward", "--json", "--tokens", "5,9,100", "--w4a", "nvfp4", "--scales", report, gptq)
	if err != nil || !strings.HasPrefix(fw, `{"shape":[3,512]`) || !strings.Contains(errs, "not causal") {
		t.Fatalf("forward --scales: %v %.80s %s", err, fw, errs)
	}
	if _, _, err := runArgs("forward", "--tokens", "5,9", "--w4a", "nvfp4", "--recipe", "least_squares", "--scales", report, gptq); err == nil || !strings.Contains(err.Error(), "calibrated with recipe nvidia") {
		t.Fatalf("recipe mismatch: %v", err)
	}
	if _, _, err := runArgs("eval", "--data", data, "--w4a", "nvfp4", "--scales", report, gptq); err == nil || !strings.Contains(err.Error(), "calibration-overlap") {
		t.Fatalf("eval on the calibration file: %v", err)
	}
	if _, _, err := runArgs("eval", "--data", data, "--w4a", "nvfp4", "--scales", report, "--allow-overlap", gptq); err != nil {
		t.Fatal(err)
	}
	// The mixed policy (FP8 attention) has other NVFP4 producers: the
	// all-NVFP4 report is refused; one calibrated under it holds the MLP's
	// producers alone, and says so.
	if _, _, err := runArgs("eval", "--data", held, "--w4a", "nvfp4", "--attention", "fp8", "--scales", report, gptq); err == nil || !strings.Contains(err.Error(), "calibrate --pass act_max --attention fp8") {
		t.Fatalf("an NVFP4-policy report under --attention fp8: %v", err)
	}
	mixed := filepath.Join(dir, "mixed.json")
	out, _, err = runArgs("calibrate", "--pass", "act_max", "--attention", "fp8", "--recipe", "nvidia", "--data", data, "--out", mixed, "--json", gptq)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		GlobalScales map[string]float32 `json:"global_scales"`
		Attention    string             `json:"attention"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Attention != "fp8" || len(rep.GlobalScales) != 4 ||
		rep.GlobalScales["model.layers.1.mlp.down_proj.input"] == 0 || rep.GlobalScales["model.layers.0.post_attention_residual"] == 0 {
		t.Fatalf("mixed-policy act_max report: %v %s", err, out)
	}
	if _, _, err := runArgs("forward", "--tokens", "5,9", "--w4a", "nvfp4", "--scales", mixed, gptq); err == nil || !strings.Contains(err.Error(), "calibrated under the mixed policy") {
		t.Fatalf("a mixed-policy report under NVFP4 attention: %v", err)
	}
	// GPT-QModel's own report names no policy: its producers decide.
	gq := filepath.Join(dir, "gptqmodel.json")
	os.WriteFile(gq, []byte(strings.Replace(out, `,"attention":"fp8"`, "", 1)), 0o644)
	if _, _, err := runArgs("eval", "--data", held, "--w4a", "nvfp4", "--attention", "fp8", "--scales", gq, gptq); err != nil {
		t.Fatalf("a mixed-policy report without the attention key: %v", err)
	}
	ev, _, err := runArgs("eval", "--json", "--compare", "--data", held, "--w4a", "nvfp4", "--attention", "fp8", "--scales", mixed, gptq)
	if err != nil {
		t.Fatal(err)
	}
	var cmp map[string]any
	if err := json.Unmarshal([]byte(ev), &cmp); err != nil || cmp["difference"] == nil {
		t.Fatalf("eval --compare: %v %s", err, ev)
	}
	for _, pass := range []string{"weight_max", "percentile", "headroom", "awq_lite", "local_hessian"} {
		out, _, err := runArgs("calibrate", "--pass", pass, "--data", held, gptq)
		if err != nil || !strings.Contains(out, "model.layers.1.") {
			t.Fatalf("%s: %v\n%s", pass, err, out)
		}
	}
	if _, _, err := runArgs("calibrate", "--pass", "act_max", "--w4a", "fp8", "--data", held, gptq); err == nil || !strings.Contains(err.Error(), "per-token dynamic scale") {
		t.Fatalf("act_max fp8: %v", err)
	}
	acts := filepath.Join(dir, "x.f32")
	if _, _, err := runArgs("calibrate", "--pass", "local_hessian", "--module", "model.layers.0.mlp.down_proj", "--data", held, "--out", acts, gptq); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(acts); err != nil || st.Size() != 5*768*4 {
		t.Fatalf("dump: %v %v", st, err)
	}
	// the dump is what quantize --recipe local_hessian --data reads
	q := filepath.Join(dir, "q.safetensors")
	if _, _, err := runArgs("quantize", "--format", "nvfp4", "--recipe", "local_hessian", "--data", acts, "--out", q, gptq, "model.layers.0.mlp.down_proj"); err != nil {
		t.Fatal(err)
	}
	// ... for that module only: up_proj's 256-wide inputs divide the 5×768
	// floats too, but these are down_proj's (the note beside them says so)
	_, _, err = runArgs("quantize", "--format", "nvfp4", "--recipe", "local_hessian", "--data", acts, "--out", q, gptq, "model.layers.0.mlp.up_proj")
	if err == nil || !strings.Contains(err.Error(), `rule local-hessian-data: the inputs of module "model.layers.0.mlp.down_proj"`) {
		t.Fatalf("down_proj's inputs for up_proj: %v", err)
	}
	if _, _, err := runArgs("report", "--data", acts, gptq, "model.layers.1.self_attn.q_proj"); err == nil || !strings.Contains(err.Error(), "the inputs of module") {
		t.Fatalf("report with another module's inputs: %v", err)
	}
	// A dump for up_proj whose write fails part-way (the shell's ulimit -f:
	// 4 kB of its 15 kB) leaves down_proj's inputs with their own note: up_proj
	// is still refused them, and down_proj still takes them.
	cmd := exec.Command("sh", "-c", `ulimit -f 8 && exec "$0" -test.run='^$'`, os.Args[0])
	cmd.Env = append(os.Environ(), "QUANTSCOPE_RUN_MAIN=1", "QUANTSCOPE_ARGS="+strings.Join([]string{"calibrate", "--pass", "local_hessian", "--module", "model.layers.0.mlp.up_proj", "--data", held, "--out", acts, gptq}, " "))
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "--out "+acts+": file too large") {
		t.Fatalf("a dump past the file-size limit: %v %s", err, out)
	}
	_, _, err = runArgs("quantize", "--format", "nvfp4", "--recipe", "local_hessian", "--data", acts, "--out", q, gptq, "model.layers.0.mlp.up_proj")
	if err == nil || !strings.Contains(err.Error(), `the inputs of module "model.layers.0.mlp.down_proj"`) {
		t.Fatalf("after the failed dump, down_proj's inputs for up_proj: %v", err)
	}
	if _, _, err := runArgs("quantize", "--format", "nvfp4", "--recipe", "local_hessian", "--data", acts, "--out", q, gptq, "model.layers.0.mlp.down_proj"); err != nil {
		t.Fatalf("down_proj's inputs after the failed dump: %v", err)
	}
}
