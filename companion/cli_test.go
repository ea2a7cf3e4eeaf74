package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/synth"
)

// Every command's --help (and -h, and `help CMD`) prints its usage and
// every flag on stdout and exits 0.
func TestCommandHelp(t *testing.T) {
	flags := map[string][]string{
		"inspect": {"-json", "-endpoint", "-revision", "-token"},
		"decode":  {"-json", "-rows", "-out", "-endpoint", "-revision", "-token"},
		"serve":   {"-addr", "-demo", "-hub", "-wasm"},
		"hub":     {"-addr", "-latency"},
		"demo":    {},
	}
	for cmd, want := range flags {
		for _, args := range [][]string{{cmd, "--help"}, {cmd, "-h"}, {"help", cmd}, {cmd, "--json", "--help"}} {
			if cmd != "inspect" && cmd != "decode" && len(args) == 3 {
				continue
			}
			out, stderr, code := runMain(t, args...)
			if code != 0 || stderr != "" || !strings.HasPrefix(out, "usage: quantscope "+cmd) {
				t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, stderr)
				continue
			}
			for _, f := range want {
				if !strings.Contains(out, "  "+f+" ") && !strings.Contains(out, "  "+f+"\n") {
					t.Errorf("%v: flag %s not listed:\n%s", args, f, out)
				}
			}
		}
	}
}

// A mistake on the command line is one line on stderr, as every error is
// (DESIGN.md), exit status 1: the mistake, then where the usage is — the
// command's --help for one made inside a command, the program's otherwise.
// A flag's own error is said once, not wrapped in the flag package's words.
func TestUsageErrorsShowTheCommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		line string
	}{
		{[]string{"forward", "--top", "3", "org/name"}, "error: forward: flag provided but not defined: -top (quantscope forward --help lists its flags)"},
		{[]string{"inspect"}, "error: inspect wants SOURCE, got 0 argument(s) (quantscope inspect --help lists its flags)"},
		{[]string{"frobnicate"}, "error: unknown command \"frobnicate\" (quantscope --help lists the commands)"},
		{[]string{}, "error: no command given (quantscope --help lists the commands)"},
		{[]string{"stats", "--bins", "0", "org/name", "m"}, "error: stats: --bins 0 outside 1..4096 (quantscope stats --help lists its flags)"},
		{[]string{"fit", "--tp", "0", "org/name"}, "error: fit: --tp 0: want 1 to 1024 GPUs a replica (quantscope fit --help lists its flags)"},
		{[]string{"fit", "--gpu", "H100:0", "org/name"}, "error: fit: --gpu \"H100:0\": want NAME:GB with a positive size in GB (decimal, as vendors state it) or GiB, e.g. A100:80 or A100:80GiB (quantscope fit --help lists its flags)"},
		{[]string{"fit", "--context", "0", "org/name"}, "error: fit: --context 0: want 1 to 67108864 tokens (quantscope fit --help lists its flags)"},
		{[]string{"fit", "--batch", "-1", "org/name"}, "error: fit: --batch -1: want 1 to 1048576 sequences (quantscope fit --help lists its flags)"},
		{[]string{"fit", "--reserve", "1", "org/name"}, "error: fit: --reserve \"1\": a bare number is a fraction of each GPU, below 1; write 1GB for a size, or a percentage (10%) (quantscope fit --help lists its flags)"},
	} {
		out, stderr, code := runMain(t, c.args...)
		if code != 1 || out != "" || stderr != c.line+"\n" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", c.args, code, out, stderr, c.line)
		}
	}
}

// `quantscope version` and `--version` print the module version from the
// build information and the Go version, and exit 0.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		out, stderr, code := runMain(t, arg)
		if code != 0 || stderr != "" || !strings.HasPrefix(out, "quantscope ") || !strings.Contains(out, runtime.Version()) ||
			strings.Count(out, "\n") != 1 {
			t.Errorf("%s: exit %d, %q %q", arg, code, out, stderr)
		}
	}
	if !strings.Contains(usage, "version") {
		t.Error("the usage does not list version")
	}
	out, stderr, code := runMain(t, "version", "--json")
	var v struct{ Module, Go string }
	if err := json.Unmarshal([]byte(out), &v); code != 0 || stderr != "" || err != nil || v.Module != "github.com/quantscope/quantscope" || v.Go != runtime.Version() {
		t.Errorf("version --json: exit %d, %q %q (%v)", code, out, stderr, err)
	}
}

// Every key of inspect --json is snake_case, files[] included.
func TestInspectJSONFilesKeys(t *testing.T) {
	src := filepath.Join(demo(t), synth.Org, "DeepSeek-tiny-FP8")
	out, stderr, code := runMain(t, "inspect", "--json", src)
	if code != 0 {
		t.Fatal(stderr)
	}
	var doc struct {
		Files []map[string]any `json:"files"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Files) == 0 {
		t.Fatal("no files[]")
	}
	for _, f := range doc.Files {
		if _, ok := f["path"].(string); !ok || len(f) != 2 {
			t.Fatalf("files[] entry %v: want {path, size}", f)
		}
		if n, ok := f["size"].(float64); !ok || n <= 0 {
			t.Fatalf("files[] entry %v: want {path, size}", f)
		}
	}
	var keys func(v any)
	keys = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if k != strings.ToLower(k) {
					t.Errorf("key %q is not snake_case", k)
				}
				keys(e)
			}
		case []any:
			for _, e := range x {
				keys(e)
			}
		}
	}
	var all any
	json.Unmarshal([]byte(out), &all)
	for k, v := range all.(map[string]any) {
		if k == "summary" { // its maps are keyed by format, dtype and kind names
			continue
		}
		keys(v)
	}
}

// The CLI's errors say what is wrong in the user's words.
func TestCLIErrorWording(t *testing.T) {
	dir := demo(t)
	src := filepath.Join(dir, synth.Org, "Llama-tiny-NVFP4")
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"decode", "--rows", "5:2", src, "model.layers.0.mlp.up_proj"}, `--rows "5:2": reversed`},
		{[]string{"decode", "--rows", "3:3", src, "model.layers.0.mlp.up_proj"}, `--rows "3:3": no rows (A:B is rows A to B-1: 3:4?)`},
		// a mistake the module is not needed for is found before the repo is
		// read (this endpoint refuses connections: a read would say so)
		{[]string{"decode", "--endpoint", "http://127.0.0.1:9", "--rows", "3", "org/name", "m"}, `--rows "3": want A:B`},
		{[]string{"decode", "--endpoint", "http://127.0.0.1:9", "--rows", "a:b", "org/name", "m"}, `--rows "a:b": "a" is not a row number (A:B with A and B whole numbers from 0 to the module's rows`},
		{[]string{"decode", "--endpoint", "http://127.0.0.1:9", "--rows", "5:2", "org/name", "m"}, `--rows "5:2": reversed`},
		{[]string{"decode", "--endpoint", "http://127.0.0.1:9", "--rows", "-1:2", "org/name", "m"}, `--rows "-1:2": rows start at 0`},
		{[]string{"decode", "--endpoint", "http://127.0.0.1:9", "--out", missing + "/x.f32", "org/name", "m"}, "--out " + missing + "/x.f32: its folder " + missing + " does not exist"},
		{[]string{"inspect", missing}, "no such file or directory: " + missing},
		{[]string{"inspect", "./no-such-dir"}, "no such file or directory: ./no-such-dir"},
		{[]string{"inspect", "no-such.safetensors"}, "no such file or directory: no-such.safetensors"},
		{[]string{"decode", missing + "/model.safetensors", "x"}, "no such file or directory: " + missing + "/model.safetensors"},
		{[]string{"inspect", "--endpoint", "http://127.0.0.1:9", "--revision", "main", "org/name@nope"}, `org/name@nope names revision "nope" and --revision says "main": give one`},
		// what was silently ignored or taken for the default
		{[]string{"inspect", "--endpoint=", "org/name"}, `inspect: --endpoint "": empty; leave the flag out for the default`},
		{[]string{"forward", "--tokens", "1,,2", src}, "--tokens: an empty field between commas at byte 1"},
		{[]string{"forward", "--tokens", "1,2", "--recipe", "nvidia", src}, "--recipe nvidia: an NVFP4 activation recipe, for --w4a nvfp4 (this run is --w4a none)"},
		{[]string{"quantize", "--format", "nvfp4", "--data", missing, "--out", filepath.Join(t.TempDir(), "q.safetensors"), src, "model.layers.0.mlp.up_proj"}, "quantize: --data is the activations of --recipe local_hessian; recipe max, the default, reads none"},
		{[]string{"hub", src + "/model.safetensors"}, "is not a folder (the hub serves a folder of ORG/NAME repo folders)"},
		{[]string{"hub", "--latency", "-5s", src}, "hub: --latency -5s: want a duration of 0 or more"},
		{[]string{"version", "x"}, "version wants no arguments, got 1 argument(s)"},
		{[]string{"report", filepath.Join(dir, synth.Org, "gpt-oss-tiny-MXFP4"), "model.layers.0.mlp.experts.gate_up_proj"}, "rule quantize-shape: weight shape [8 1024 256] is 8 experts stacked in one tensor, not one 2-D [out, in] linear"},
	} {
		_, stderr, code := runMain(t, c.args...)
		if first, _, _ := strings.Cut(stderr, "\n"); code != 1 || !strings.HasPrefix(first, "error: ") || !strings.Contains(first, c.want) {
			t.Errorf("%v: exit %d, %q, want error: %s", c.args, code, stderr, c.want)
		}
	}
}

// An unknown revision on a hub is reported as such, not answered with main.
func TestUnknownRevisionProcess(t *testing.T) {
	dir := t.TempDir()
	r := synth.AWQInt4()
	r.WriteDir(filepath.Join(dir, r.ID))
	url := startMain(t, "hub", "--addr", "127.0.0.1:0", dir)
	if _, stderr, code := runMain(t, "inspect", "--endpoint", url, r.ID+"@main"); code != 0 {
		t.Fatalf("@main: %d %s", code, stderr)
	}
	for _, args := range [][]string{{r.ID + "@nope"}, {"--revision", "nope", r.ID}, {url + "/" + r.ID + "/tree/nope"}} {
		out, stderr, code := runMain(t, append([]string{"inspect", "--endpoint", url}, args...)...)
		if code != 1 || out != "" || !strings.Contains(stderr, "revision not found") {
			t.Errorf("%v: exit %d, %q", args, code, stderr)
		}
	}
}

// manyExcludes writes the mislabeled demo repo with the 245 exclude_modules
// of nvidia/DeepSeek-R1-FP4's hf_quant_config.json (seed 004's shape).
func manyExcludes(t *testing.T, dir string) string {
	t.Helper()
	r := synth.Mislabeled()
	p := filepath.Join(dir, r.ID)
	if err := r.WriteDir(p); err != nil {
		t.Fatal(err)
	}
	var ex []string
	for i := range 61 {
		ex = append(ex, fmt.Sprintf("model.layers.%d.self_attn*", i))
		if i >= 3 {
			ex = append(ex, fmt.Sprintf("model.layers.%d.mlp.gate", i))
		}
		ex = append(ex, fmt.Sprintf("model.layers.%d.input_layernorm", i), fmt.Sprintf("model.layers.%d.post_attention_layernorm", i))
	}
	ex = append(ex, "model.norm", "model.embed_tokens", "lm_head", "model.layers.61*")
	cfg := map[string]any{"producer": map[string]any{"name": "modelopt", "version": "0.27.1"},
		"quantization": map[string]any{"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ex}}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(p, "hf_quant_config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// 245 exclusion entries print as a few patterns; --json keeps every entry
// and adds the grouped form.
func TestSchemeExclusionSummary(t *testing.T) {
	src := manyExcludes(t, t.TempDir())
	out, stderr, code := runMain(t, "inspect", src)
	if code != 0 {
		t.Fatal(stderr)
	}
	line := strings.Split(out, "\n")[2]
	for _, w := range []string{"model.layers.N.self_attn* (N in 0–60: 61)", "model.layers.N.mlp.gate (N in 3–60: 58)", "model.layers.61*", "lm_head"} {
		if !strings.Contains(line, w) {
			t.Errorf("scheme line lacks %q: %s", w, line)
		}
	}
	if len(line) > 400 {
		t.Errorf("scheme line is %d characters", len(line))
	}
	js, _, _ := runMain(t, "inspect", "--json", src)
	var doc struct {
		Scheme struct {
			ExcludeModules []string `json:"exclude_modules"`
			ExcludeSummary []struct {
				Pattern string
				Count   int
				Layers  string
			} `json:"exclude_summary"`
		}
	}
	json.Unmarshal([]byte(js), &doc)
	if len(doc.Scheme.ExcludeModules) != 245 || len(doc.Scheme.ExcludeSummary) != 8 || doc.Scheme.ExcludeSummary[0].Count != 61 {
		t.Errorf("--json scheme: %d entries, summary %+v", len(doc.Scheme.ExcludeModules), doc.Scheme.ExcludeSummary)
	}
}

// quantize --out into a folder that does not exist fails at once, naming
// the path the user gave (not the temporary file it writes first).
func TestQuantizeOutFolderMissing(t *testing.T) {
	src := filepath.Join(demo(t), synth.Org, "Llama-tiny-GPTQ-Int4")
	out := filepath.Join(t.TempDir(), "nope", "q.safetensors")
	_, stderr, code := runMain(t, "quantize", "--format", "nvfp4", "--out", out, src, "model.layers.0.mlp.up_proj")
	if code != 1 || !strings.Contains(stderr, "--out "+out+": its folder") || strings.Contains(stderr, ".partial") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// ORG/NAME that is also a folder here is read from the folder, and with an
// explicit --endpoint the command says so and how to reach the hub's.
func TestLocalFolderShadowsEndpoint(t *testing.T) {
	dir := demo(t)
	t.Chdir(dir)
	var notes bytes.Buffer
	old := noteOut
	noteOut = &notes
	defer func() { noteOut = old }()
	src, err := resolveSource(context.Background(), synth.Org+"/Llama-tiny-GPTQ-Int4", sourceFlags{endpoint: "http://127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := src.(*hub.Dir); !ok {
		t.Fatalf("read from %T, want the local folder", src)
	}
	if !strings.Contains(notes.String(), "read from the local folder of that name, not from --endpoint http://127.0.0.1:9 (give http://127.0.0.1:9/"+synth.Org+"/Llama-tiny-GPTQ-Int4") {
		t.Errorf("note: %q", notes.String())
	}
	notes.Reset()
	if _, err := resolveSource(context.Background(), synth.Org+"/Llama-tiny-GPTQ-Int4", sourceFlags{}); err != nil || notes.Len() != 0 {
		t.Errorf("without --endpoint: %v, note %q", err, notes.String())
	}
}

// A network error on a one-file URL names the URL once (the request's own
// words say it), not the source, the file and the request each.
func TestURLErrorNamesItOnce(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL + "/x/model.safetensors"
	srv.Close() // nothing listens there now
	_, stderr, code := runMain(t, "inspect", u)
	if code != 1 || strings.Count(stderr, u) != 1 || strings.Count(stderr, "model.safetensors") != 1 || strings.Count(stderr, "\n") != 1 {
		t.Errorf("exit %d: %q", code, stderr)
	}
}
