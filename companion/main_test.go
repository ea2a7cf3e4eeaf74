package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/synth"
)

// TestMain lets a test run the real binary's main (exit status and stderr
// included) by re-executing the test binary.
func TestMain(m *testing.M) {
	if out := os.Getenv("QUANTSCOPE_PEAK_TO"); out != "" {
		os.Exit(measurePeak(out))
	}
	if os.Getenv("QUANTSCOPE_RUN_MAIN") == "1" {
		os.Args = append([]string{"quantscope"}, strings.Fields(os.Getenv("QUANTSCOPE_ARGS"))...)
		main()
		os.Exit(0)
	}
	code := m.Run()
	if demoDir != "" {
		os.RemoveAll(demoDir)
	}
	os.Exit(code)
}

// runMain runs quantscope as a process and returns stdout, stderr and the exit code.
func runMain(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "QUANTSCOPE_RUN_MAIN=1", "QUANTSCOPE_ARGS="+strings.Join(args, " "))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

var demoDir string

func demo(t *testing.T) string {
	t.Helper()
	if demoDir == "" {
		d, err := os.MkdirTemp("", "quantscope-demo-")
		if err != nil {
			t.Fatal(err)
		}
		demoDir = d
		for _, r := range synth.All() {
			if err := r.WriteDir(filepath.Join(demoDir, filepath.FromSlash(r.ID))); err != nil {
				t.Fatal(err)
			}
		}
	}
	return demoDir
}

func TestInspectJSONContract(t *testing.T) {
	dir := demo(t)
	for _, r := range synth.All() {
		var out bytes.Buffer
		if err := run(context.Background(), []string{"inspect", "--json", filepath.Join(dir, r.ID)}, &out, &out); err != nil {
			t.Fatalf("%s: %v", r.ID, err)
		}
		var doc struct {
			Summary struct {
				Files, Tensors     int
				Bytes              uint64
				BytesByDType       map[string]uint64 `json:"bytes_by_dtype"`
				Parameters         uint64
				ParametersByFormat map[string]uint64 `json:"parameters_by_format"`
				BitsPerWeight      float64           `json:"bits_per_weight"`
				QuantizedModules   int               `json:"quantized_modules"`
			}
			Scheme  map[string]any
			Modules []struct {
				Name        string
				Format      string
				WeightShape []uint64 `json:"weight_shape"`
				Parameters  uint64
				Bytes       uint64
				Tensors     map[string]string
			}
			Tensors []struct {
				Name, File, DType string
				Shape             []uint64
				DataOffsets       [2]uint64 `json:"data_offsets"`
			}
			Findings []struct{ Rule, Severity, Tensor, Message string }
			Fetch    struct{ Requests, Bytes *int64 }
		}
		dec := json.NewDecoder(&out)
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("%s: %v", r.ID, err)
		}
		if dec.More() {
			t.Fatalf("%s: more than one JSON value", r.ID)
		}
		s := doc.Summary
		if s.Files == 0 || s.Tensors != len(doc.Tensors) || s.Parameters == 0 || doc.Scheme["method"] == nil || doc.Fetch.Requests == nil || doc.Fetch.Bytes == nil {
			t.Fatalf("%s: summary %+v", r.ID, s)
		}
		if math.Abs(s.BitsPerWeight-8*float64(s.Bytes)/float64(s.Parameters)) > 1e-9 {
			t.Errorf("%s: bits_per_weight %v", r.ID, s.BitsPerWeight)
		}
		var params uint64
		for _, m := range doc.Modules {
			params += m.Parameters
			if want, ok := r.Formats[m.Name]; ok && m.Format != want {
				t.Errorf("%s %s: format %s want %s", r.ID, m.Name, m.Format, want)
			}
		}
		if params != s.Parameters {
			t.Errorf("%s: modules' parameters sum to %d, summary says %d", r.ID, params, s.Parameters)
		}
		var dt uint64
		for _, v := range s.BytesByDType {
			dt += v
		}
		if dt != s.Bytes {
			t.Errorf("%s: bytes_by_dtype sums to %d of %d", r.ID, dt, s.Bytes)
		}
	}
}

func TestDecode(t *testing.T) {
	dir := demo(t)
	r := synth.GPTQInt4()
	src := filepath.Join(dir, r.ID)
	name := "model.layers.1.mlp.down_proj"
	outFile := filepath.Join(t.TempDir(), "w.f32")
	stdout, stderr, code := runMain(t, "decode", "--rows", "3:5", "--out", outFile, src, name)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.HasPrefix(stdout, "shape=2,768\n") || !strings.Contains(stdout, "min=") || !strings.Contains(stdout, "std=") {
		t.Fatalf("stdout %q", stdout)
	}
	raw, _ := os.ReadFile(outFile)
	if len(raw) != 2*768*4 {
		t.Fatalf("%d bytes written", len(raw))
	}
	w := r.Weights[name]
	var se, ss float64
	for i := range 2 * 768 {
		v := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		o := w.Data[3*768+i]
		se += float64(v-o) * float64(v-o)
		ss += float64(o) * float64(o)
	}
	if math.Sqrt(se/ss) > 0.3 {
		t.Fatalf("decoded rows far from the weights: %v", math.Sqrt(se/ss))
	}
	// --json gives the same values, in the [out, in] orientation.
	stdout, _, code = runMain(t, "decode", "--json", "--rows", "3:5", src, name+".qweight")
	var doc struct {
		Name   string
		Shape  []int
		Values []float32
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &doc) != nil {
		t.Fatalf("json decode: %d %q", code, stdout)
	}
	if doc.Name != name || doc.Shape[0] != 2 || doc.Shape[1] != 768 || len(doc.Values) != 2*768 {
		t.Fatalf("json %s %v %d", doc.Name, doc.Shape, len(doc.Values))
	}
	for i, v := range doc.Values {
		if v != math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])) {
			t.Fatalf("--json and --out differ at %d", i)
		}
	}
}

func TestBadInput(t *testing.T) {
	dir := demo(t)
	broken := filepath.Join(t.TempDir(), "broken.safetensors")
	good, _ := os.ReadFile(filepath.Join(dir, synth.Org, "Llama-tiny-AWQ", "model.safetensors"))
	b := append([]byte(nil), good...)
	copy(b[8:], []byte(`{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},`)) // an entry whose nbytes are fine, then broken JSON
	os.WriteFile(broken, b, 0o644)
	huge := filepath.Join(t.TempDir(), "huge.safetensors")
	hb := make([]byte, 4096)
	binary.LittleEndian.PutUint64(hb, 1<<40)
	os.WriteFile(huge, hb, 0o644)
	src := filepath.Join(dir, synth.Org, "Llama-tiny-NVFP4")
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"no command"}},
		{[]string{"frobnicate"}, []string{"unknown command"}},
		{[]string{"inspect"}, []string{"SOURCE"}},
		{[]string{"inspect", "--bogus", src}, []string{"bogus"}},
		{[]string{"inspect", filepath.Join(dir, "no-such-repo")}, []string{"no-such-repo"}},
		{[]string{"inspect", broken}, []string{"broken.safetensors", "rule"}},
		{[]string{"inspect", huge}, []string{"huge.safetensors", "rule header-too-large"}},
		{[]string{"decode", src, "model.layers.9.mlp.up_proj"}, []string{"model.layers.9.mlp.up_proj"}},
		{[]string{"decode", "--rows", "5:2", src, "model.layers.0.mlp.up_proj"}, []string{"--rows"}},
		{[]string{"decode", "--rows", "0:99999", src, "model.layers.0.mlp.up_proj"}, []string{"outside"}},
	} {
		stdout, stderr, code := runMain(t, c.args...)
		if code != 1 {
			t.Errorf("%v: exit %d", c.args, code)
		}
		if stdout != "" {
			t.Errorf("%v: stdout %q, want nothing", c.args, stdout)
		}
		first, _, _ := strings.Cut(stderr, "\n")
		if !strings.HasPrefix(first, "error: ") {
			t.Errorf("%v: stderr %q", c.args, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(first, w) {
				t.Errorf("%v: error line %q lacks %q", c.args, first, w)
			}
		}
		if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine") {
			t.Errorf("%v: panicked: %s", c.args, stderr)
		}
	}
}

func TestHumanInspect(t *testing.T) {
	dir := demo(t)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"inspect", filepath.Join(dir, synth.Org, "Llama-tiny-FP4-mislabeled")}, &out, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"bits per weight", "nvfp4", "bf16", "config-excludes-quantized", "model.layers.0.self_attn.q_proj.weight", "index-total-size"} {
		if !strings.Contains(s, want) {
			t.Errorf("human output lacks %q:\n%s", want, s)
		}
	}
}

// One rule repeated many times is shown a few times and counted.
func TestHumanInspectCapsRepeats(t *testing.T) {
	dir := t.TempDir()
	r := synth.DeepSeekFP8()
	if err := r.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	// Leave every scale out of the index: one index-unlisted-tensor warning each.
	var idx struct {
		Metadata  map[string]any    `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	p := filepath.Join(dir, "model.safetensors.index.json")
	b, _ := os.ReadFile(p)
	json.Unmarshal(b, &idx)
	dropped := 0
	for name := range idx.WeightMap {
		if strings.HasSuffix(name, ".weight_scale_inv") {
			delete(idx.WeightMap, name)
			dropped++
		}
	}
	b, _ = json.Marshal(idx)
	os.WriteFile(p, b, 0o644)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"inspect", dir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	shown, more := 0, ""
	for _, line := range strings.Split(out.String(), "\n") {
		if !strings.Contains(line, "index-unlisted-tensor") {
			continue
		}
		if strings.Contains(line, "more (inspect --json") {
			more = line
		} else {
			shown++
		}
	}
	if dropped <= findingsPerRule || shown != findingsPerRule || !strings.Contains(more, fmt.Sprintf("and %d more", dropped-findingsPerRule)) {
		t.Fatalf("%d dropped, %d shown, summary %q", dropped, shown, more)
	}
}

// measurePeak runs quantscope (QUANTSCOPE_ARGS) as its child and writes the
// child's peak resident set, in KiB, to the file out; it exits as the child
// did. Linux records in a child's peak the memory of the process it was
// spawned from (exec keeps the larger of the two high-water marks), so a
// test process that has generated demo repos would count its own hundreds
// of MB in every child: this small process in between starts the measured
// one from a fresh address space.
func measurePeak(out string) int {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "QUANTSCOPE_PEAK_TO=") {
			env = append(env, e)
		}
	}
	cmd.Env = append(env, "QUANTSCOPE_RUN_MAIN=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := os.WriteFile(out, []byte(strconv.FormatInt(peakKiB(cmd.ProcessState), 10)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return cmd.ProcessState.ExitCode()
}
