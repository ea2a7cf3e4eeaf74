package ops

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/calib"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/synth"
)

func TestCalibrateOp(t *testing.T) {
	s := synth.SmallLlama()
	repo, err := synth.LlamaRepo(s, synth.LlamaWeights(s), "gptq")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := repo.WriteDir(filepath.Join(dir, "m")); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "d.txt")
	os.WriteFile(data, []byte("1 2 3 4 5\n9 8 7\n"), 0o644)
	c := load(t, filepath.Join(dir, "m"))
	op, ok := Lookup("calibrate")
	if !ok {
		t.Fatal("calibrate is not registered")
	}
	var calls int
	env := Env{Checkpoint: c, Backend: cpu.New(), Progress: func(done, total int64) { calls++ }}
	res, err := op(context.Background(), env, "", json.RawMessage(`{"pass":"act_max","data":"`+data+`","recipe":"four_six"}`))
	if err != nil {
		t.Fatal(err)
	}
	rep := res.JSON.(*calib.ActMaxReport)
	if len(rep.Boundaries) != 9 || calls != 9 || len(res.Arrays) != 10 {
		t.Fatalf("%d boundaries, %d progress calls, %d arrays", len(rep.Boundaries), calls, len(res.Arrays))
	}
	for _, a := range res.Arrays {
		if a.Shape[0] != 2 || len(a.F32) != 2 {
			t.Fatalf("%s: %v", a.Name, a.Shape)
		}
		if a.Name == "act_max.global_scale.mlp.down_proj.input" && (a.F32[1] != rep.Boundaries[7].GlobalScale || a.F32[0] != rep.Boundaries[3].GlobalScale) {
			t.Fatalf("%s = %v", a.Name, a.F32)
		}
		if a.Name == "act_max.amax.input" && (a.F32[0] != rep.Boundaries[0].Amax || !math.IsNaN(float64(a.F32[1]))) {
			t.Fatalf("%s = %v", a.Name, a.F32)
		}
	}
	for _, bad := range []string{`{"pass":"act_max"}`, `{"pass":"median","data":"x"}`, `{"pass":"act_max","data":"` + data + `","w4a":"fp8"}`, `{"pass":"act_max","data":"` + data + `","recipe":"nvidia_headroom"}`, `{"pass":"awq_lite","data":"` + data + `","w4a":"nvfp4"}`, `{"pass":"act_max","bogus":1}`,
		`{"pass":"percentile","data":"` + data + `","percentile":0}`, `{"pass":"headroom","data":"` + data + `","rho":0}`} {
		if _, err := op(context.Background(), env, "", json.RawMessage(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestCalibrateOpDump(t *testing.T) {
	s := synth.SmallLlama()
	repo, _ := synth.LlamaRepo(s, synth.LlamaWeights(s), "f32")
	dir := t.TempDir()
	if err := repo.WriteDir(filepath.Join(dir, "m")); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "d.txt")
	os.WriteFile(data, []byte("1 2 3 4 5\n9 8 7\n"), 0o644)
	env := Env{Checkpoint: load(t, filepath.Join(dir, "m")), Backend: cpu.New()}
	op, _ := Lookup("calibrate")
	res, err := op(context.Background(), env, "", json.RawMessage(`{"pass":"local_hessian","data":"`+data+`","module":"model.layers.0.self_attn.o_proj"}`))
	if err != nil {
		t.Fatal(err)
	}
	// The inputs, and calibrate's note of them as the command line writes
	// it beside them, so that quantize refuses them for another module.
	if len(res.Files) != 2 || len(res.Files[0].Data) != 8*256*4 || res.Files[0].Path != "" ||
		res.Files[1].Name != res.Files[0].Name+".json" || string(res.Files[1].Data) != `{"module":"model.layers.0.self_attn.o_proj","tokens":8,"in":256}`+"\n" {
		t.Fatalf("files %+v", res.Files)
	}
	env.WriteDir = t.TempDir()
	res, err = op(context.Background(), env, "", json.RawMessage(`{"pass":"local_hessian","data":"`+data+`","module":"model.layers.0.self_attn.o_proj"}`))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(res.Files[0].Path); err != nil || st.Size() != 8*256*4 {
		t.Fatalf("written: %v %v", st, err)
	}
	if len(res.Files) != 2 || res.Files[1].Path != res.Files[0].Path+".json" {
		t.Fatalf("files %+v", res.Files)
	}
	// A misspelt module gets the nearest names; act_max on these dense
	// weights says it measures the W4A forward, which needs GPTQ INT4.
	if _, err := op(context.Background(), env, "", json.RawMessage(`{"pass":"local_hessian","data":"`+data+`","module":"model.layers.0.self_attn.o_prj"}`)); err == nil ||
		!strings.Contains(err.Error(), "nearest: model.layers.0.self_attn.o_proj") {
		t.Errorf("a misspelt module: %v", err)
	}
	if _, err := op(context.Background(), env, "", json.RawMessage(`{"pass":"act_max","data":"`+data+`"}`)); err == nil ||
		!strings.Contains(err.Error(), "act_max measures the producers of the W4A-NVFP4 forward") || strings.Contains(err.Error(), "--w4a") {
		t.Errorf("act_max on dense weights: %v", err)
	}
	// quantize reads the written pair: right for its module, refused for
	// another of the same width.
	if _, err := ReadActivations(res.Files[0].Path, "model.layers.0.self_attn.o_proj", 256); err != nil {
		t.Errorf("the dump for its own module: %v", err)
	}
	if _, err := ReadActivations(res.Files[0].Path, "model.layers.0.self_attn.q_proj", 256); err == nil || !strings.Contains(err.Error(), "rule local-hessian-data") {
		t.Errorf("the dump for another module of its width: %v", err)
	}
	// The dump stays inside the output folder: a link there to a file
	// outside it is not written through.
	outside := filepath.Join(t.TempDir(), "precious")
	os.WriteFile(outside, []byte("keep"), 0o644)
	env.WriteDir = t.TempDir()
	os.Symlink(outside, filepath.Join(env.WriteDir, "local_hessian.model.layers.0.self_attn.o_proj.f32"))
	_, err = op(context.Background(), env, "", json.RawMessage(`{"pass":"local_hessian","data":"`+data+`","module":"model.layers.0.self_attn.o_proj"}`))
	if err != nil {
		t.Errorf("a dump where a link out of the folder was: %v", err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep" {
		t.Errorf("the file outside the folder now holds %d bytes", len(b))
	}
	// the dump took the link's place, inside the folder
	if fi, err := os.Lstat(filepath.Join(env.WriteDir, "local_hessian.model.layers.0.self_attn.o_proj.f32")); err != nil || !fi.Mode().IsRegular() || fi.Size() != 8*256*4 {
		t.Errorf("the dump in the folder: %v %v", fi, err)
	}
}
