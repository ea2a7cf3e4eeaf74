package ops

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/synth"
)

func TestLocalReadsPath(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		r       LocalReads
		p, want string // want: the path to read, or a piece of the error
		refused bool
	}{
		{LocalReads{}, "/etc/passwd", "/etc/passwd", false}, // the command line: the user typed it
		{LocalReads{}, "../x", "../x", false},
		{LocalReads{Confined: true}, "x.bin", "reads no local files", true},
		{LocalReads{Confined: true}, "/etc/passwd", "serve --in-dir DIR", true},
		{LocalReads{Confined: true, Dir: dir}, "/etc/passwd", "not a relative path inside", true},
		{LocalReads{Confined: true, Dir: dir}, "../x.bin", "not a relative path inside", true},
		{LocalReads{Confined: true, Dir: dir}, "a/../../x.bin", "not a relative path inside", true},
		{LocalReads{Confined: true, Dir: dir}, "", "not a relative path inside", true},
		{LocalReads{Confined: true, Dir: dir}, "a/b.bin", filepath.Join(dir, "a", "b.bin"), false},
		{LocalReads{Confined: true, Dir: dir}, "./a/../b.bin", filepath.Join(dir, "b.bin"), false},
	} {
		got, err := c.r.Path("eval", "data_file", c.p)
		switch {
		case c.refused && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "rule "+RuleInDir)):
			t.Errorf("%+v %q: %q, %v; want refused saying %q and rule %s", c.r, c.p, got, err, c.want, RuleInDir)
		case !c.refused && (err != nil || got != c.want):
			t.Errorf("%+v %q: %q, %v; want %q", c.r, c.p, got, err, c.want)
		}
	}
}

// Every op that reads a file its parameters name reads it, for a job, only
// under the companion's input folder: refused with rule in-dir without one
// or outside it, read and used when the path is relative to it, as the same
// file named anywhere is on the command line.
func TestJobReadsConfined(t *testing.T) {
	dir := t.TempDir()
	s := synth.SmallLlama()
	repo, err := synth.LlamaRepo(s, synth.LlamaWeights(s), "gptq")
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.WriteDir(filepath.Join(dir, "m")); err != nil {
		t.Fatal(err)
	}
	llama := load(t, filepath.Join(dir, "m"))
	os.WriteFile(filepath.Join(dir, "ids.txt"), []byte("1 2 3 4 5\n9 8 7\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "text.txt"), []byte("The quick brown fox.\n"), 0o644)
	densePath, _, _ := denseSource(t, 16, 64)
	dense := load(t, densePath)
	acts := make([]byte, 4*8*64) // [8 tokens, 64 inputs]
	for i := range 8 * 64 {
		binary.LittleEndian.PutUint32(acts[4*i:], math.Float32bits(float32(i%13)-6))
	}
	os.WriteFile(filepath.Join(dir, "acts.f32"), acts, 0o644)

	type job struct {
		op, module string
		env        Env
		params     func(path string) string
	}
	jobs := []job{
		{"calibrate", "", Env{Checkpoint: llama}, func(p string) string { return `{"pass":"act_max","data":` + quote(p) + `}` }},
		{"eval", "", Env{Checkpoint: llama}, func(p string) string { return `{"data_file":` + quote(p) + `}` }},
		{"eval", "", Env{Checkpoint: llama}, func(p string) string { return `{"text_file":` + quote(p) + `}` }},
		{"quantize", testModule, Env{Checkpoint: dense}, func(p string) string {
			return `{"format":"nvfp4","recipe":"local_hessian","data":` + quote(p) + `}`
		}},
		{"report", testModule, Env{Checkpoint: dense}, func(p string) string { return `{"recipes":["max","local_hessian"],"data":` + quote(p) + `}` }},
	}
	files := []string{"ids.txt", "ids.txt", "text.txt", "acts.f32", "acts.f32"}
	for i, j := range jobs {
		op, _ := Lookup(j.op)
		run := func(reads LocalReads, path string) (*Result, error) {
			env := j.env
			env.Backend, env.Reads = cpu.New(), reads
			return op(context.Background(), env, j.module, json.RawMessage(j.params(path)))
		}
		abs := filepath.Join(dir, files[i])
		want, err := run(LocalReads{}, abs) // the command line
		if err != nil {
			t.Fatalf("%s %s on the command line: %v", j.op, j.params(abs), err)
		}
		for _, bad := range []struct {
			reads LocalReads
			path  string
		}{
			{LocalReads{Confined: true}, abs},
			{LocalReads{Confined: true}, files[i]},
			{LocalReads{Confined: true, Dir: filepath.Join(dir, "m")}, abs},
			{LocalReads{Confined: true, Dir: filepath.Join(dir, "m")}, "../" + files[i]},
		} {
			if _, err := run(bad.reads, bad.path); err == nil || !strings.Contains(err.Error(), "rule "+RuleInDir) {
				t.Errorf("%s %s with %+v: %v, want refused with rule %s", j.op, j.params(bad.path), bad.reads, err, RuleInDir)
			}
		}
		got, err := run(LocalReads{Confined: true, Dir: dir}, files[i])
		if err != nil {
			t.Fatalf("%s %s under the input folder: %v", j.op, j.params(files[i]), err)
		}
		a, _ := json.Marshal(want.JSON)
		b, _ := json.Marshal(got.JSON)
		if string(a) != string(b) {
			t.Errorf("%s: the job's result differs from the command line's on the same file:\n%s\n%s", j.op, b, a)
		}
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
