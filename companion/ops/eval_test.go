package ops

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/model"
	"github.com/quantscope/quantscope/synth"
	"github.com/quantscope/quantscope/tokenizer"
)

func smallLlama(t *testing.T) (Env, *model.Model, *tokenizer.Tokenizer) {
	t.Helper()
	s := synth.SmallLlama()
	r, err := synth.LlamaRepo(s, synth.LlamaWeights(s), "gptq")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := r.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	c := load(t, dir)
	m, err := model.New(c, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Parse(r.Files["tokenizer.json"])
	if err != nil {
		t.Fatal(err)
	}
	return Env{Checkpoint: c, Backend: cpu.New()}, m, tok
}

func TestEvalOp(t *testing.T) {
	env, m, tok := smallLlama(t)
	lines := []string{"The quick brown fox jumps over the lazy dog.", "Perplexity is the exponential of the mean.", "It's"}
	var seqs [][]int
	for _, l := range lines {
		ids, err := tok.Encode(l, true)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ids)
	}
	var mu sync.Mutex
	var last, total int64
	env.Progress = func(done, tot int64) {
		mu.Lock()
		defer mu.Unlock()
		if done < last {
			t.Errorf("progress went back: %d after %d", done, last)
		}
		last, total = done, tot
	}
	params, _ := json.Marshal(EvalParams{Lines: lines, W4A: model.W4AFP8, Compare: true})
	res, err := evalOp(context.Background(), env, "", params)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(2 * len(lines) * (m.Config.Layers + 2)); last != want || total != want {
		t.Errorf("progress ended at %d/%d, want %d/%d (every layer of every sequence, both modes)", last, total, want, want)
	}
	doc := res.JSON.(map[string]any)
	for i, mode := range []string{model.W4ANone, model.W4AFP8} {
		want, err := m.Perplexity(context.Background(), seqs, model.Options{W4A: mode})
		if err != nil {
			t.Fatal(err)
		}
		key := map[int]string{0: "dense", 1: "w4a"}[i]
		if got := doc[key].(model.Perplexity); got != want {
			t.Errorf("%s: %+v, want eval's %+v", key, got, want)
		}
		a := res.Arrays[i]
		if a.Name != "nll."+mode || len(a.F32) != len(lines) {
			t.Fatalf("array %d: %s %v", i, a.Name, a.Shape)
		}
		for j, seq := range seqs {
			one, err := m.Perplexity(context.Background(), [][]int{seq}, model.Options{W4A: mode})
			if err != nil {
				t.Fatal(err)
			}
			if a.F32[j] != float32(one.NLL) {
				t.Errorf("%s line %d: nll %v, want %v", mode, j, a.F32[j], float32(one.NLL))
			}
		}
	}
	if doc["w4a"].(model.Perplexity).NLL == doc["dense"].(model.Perplexity).NLL {
		t.Error("W4A-FP8 and dense give the same NLL: the W4A path did not run")
	}

	// The same lines from a file on the companion's machine, and as ids.
	f := filepath.Join(t.TempDir(), "text.txt")
	os.WriteFile(f, []byte(strings.Join(lines, "\r\n")+"\n\n"), 0o644)
	for _, p := range []EvalParams{{TextFile: f}, {Sequences: seqs}} {
		raw, _ := json.Marshal(p)
		r2, err := evalOp(context.Background(), Env{Checkpoint: env.Checkpoint, Backend: env.Backend}, "", raw)
		if err != nil {
			t.Fatal(err)
		}
		if r2.JSON.(model.Perplexity) != doc["dense"].(model.Perplexity) {
			t.Errorf("%+v: %+v, want %+v", p, r2.JSON, doc["dense"])
		}
	}
}

func TestEvalOpErrorsAndCancel(t *testing.T) {
	env, _, _ := smallLlama(t)
	for _, c := range []struct{ params, want string }{
		{`{}`, "exactly one of"},
		{`{"lines":["a"],"sequences":[[1,2]]}`, "exactly one of"},
		{`{"lines":["a b"],"compare":true}`, "compare needs w4a"},
		{`{"sequences":[[1,600]]}`, "outside the vocabulary"},
		{`{"data_file":"/nonexistent/ids.txt"}`, "no such file"},
		{`{"lines":["a"],"bins":3}`, "eval: parameters"},
	} {
		if _, err := evalOp(context.Background(), env, "", json.RawMessage(c.params)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.params, err, c.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	env.Progress = func(done, total int64) {
		if done == 2 { // after the first decoder layer
			cancel()
		}
	}
	_, err := evalOp(ctx, env, "", json.RawMessage(`{"sequences":[[1,2,3],[4,5,6]]}`))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled mid-forward: err %v, want context.Canceled", err)
	}
}

func TestForwardOp(t *testing.T) {
	env, m, tok := smallLlama(t)
	text := "The model reads the tokens."
	ids, _ := tok.Encode(text, true)
	raw, _ := json.Marshal(ForwardParams{Text: text, W4A: model.W4AFP8, TopK: 3, Logits: true})
	res, err := forwardOp(context.Background(), env, "", raw)
	if err != nil {
		t.Fatal(err)
	}
	want, err := m.Forward(context.Background(), ids, model.Options{W4A: model.W4AFP8})
	if err != nil {
		t.Fatal(err)
	}
	r := res.JSON.(ForwardResult)
	if r.Shape != [2]int{len(ids), 512} || len(r.Top) != len(ids) || len(res.Arrays) != 1 {
		t.Fatalf("shape %v, %d positions, %d arrays", r.Shape, len(r.Top), len(res.Arrays))
	}
	for i, x := range want.Data {
		if res.Arrays[0].F32[i] != x {
			t.Fatalf("logit %d differs", i)
		}
	}
	for p, top := range r.Top {
		row := want.Data[p*512 : (p+1)*512]
		// A plain selection: the best three by repeated scans.
		used := map[int]bool{}
		for k := range 3 {
			best := -1
			for v, x := range row {
				if !used[v] && (best < 0 || x > row[best]) {
					best = v
				}
			}
			used[best] = true
			if top[k].ID != best || top[k].Logit != row[best] || top[k].Text != tok.TokenString(best) {
				t.Errorf("position %d rank %d: %+v, want id %d", p, k, top[k], best)
			}
		}
	}
	if _, err := forwardOp(context.Background(), env, "", json.RawMessage(`{"tokens":[1],"top_k":101}`)); err == nil || !strings.Contains(err.Error(), "top_k") {
		t.Errorf("top_k 101: %v", err)
	}
	if _, err := forwardOp(context.Background(), env, "", json.RawMessage(`{"tokens":[1],"text":"a"}`)); err == nil {
		t.Error("tokens and text both given: no error")
	}
	// Full logits over the job's bound are refused before the forward runs
	// (512-entry vocabulary: 131,073 positions are just over 256 MiB).
	many := make([]int, maxLogitsArray/(4*512)+1)
	for i := range many {
		many[i] = 1
	}
	raw, _ = json.Marshal(ForwardParams{Tokens: many, Logits: true})
	var steps atomic.Int32
	env.Progress = func(int64, int64) { steps.Add(1) }
	if _, err := forwardOp(context.Background(), env, "", raw); err == nil || !strings.Contains(err.Error(), "rule logits-size") || !strings.Contains(err.Error(), "forward --out") {
		t.Errorf("%d positions of full logits: %v", len(many), err)
	}
	if n := steps.Load(); n != 0 {
		t.Errorf("refused after %d forward steps, want before the first", n)
	}
}

// The W4A-NVFP4 stream's parameters reach the model: the op's perplexity
// equals the model's with the same policy, recipe and calibrated scales,
// and differs from the default recipe's.
func TestEvalOpNVFP4Stream(t *testing.T) {
	env, m, _ := smallLlama(t)
	seqs := [][]int{{1, 5, 9, 13, 17, 21, 25}, {2, 4, 8, 16, 32, 64}}
	// the mixed policy's NVFP4 producers, every one (GPT-QModel refuses
	// any other set)
	scales := map[string]float32{"model.layers.0.post_attention_residual": 0.01, "model.layers.0.mlp.down_proj.input": 0.02,
		"model.layers.1.post_attention_residual": 0.01, "model.layers.1.mlp.down_proj.input": 0.02}
	run := func(p EvalParams) model.Perplexity {
		t.Helper()
		p.Sequences = seqs
		params, _ := json.Marshal(p)
		res, err := evalOp(context.Background(), env, "", params)
		if err != nil {
			t.Fatal(err)
		}
		return res.JSON.(model.Perplexity)
	}
	got := run(EvalParams{W4A: model.W4ANVFP4, Recipe: "nvidia", Attention: model.W4AFP8, Scales: scales})
	want, err := m.Perplexity(context.Background(), seqs, model.Options{W4A: model.W4ANVFP4, Recipe: "nvidia", Attention: model.W4AFP8, Scales: scales})
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("eval op %+v, want the model's %+v", got, want)
	}
	if def := run(EvalParams{W4A: model.W4ANVFP4}); def == got {
		t.Fatalf("recipe, attention and scales changed nothing: %+v", def)
	}
	// An attention producer's scale under the mixed policy (whose attention
	// is FP8) would be ignored, and a missing MLP producer would fall back
	// to a dynamic scale: refused, as GPT-QModel refuses them.
	for _, bad := range []map[string]float32{
		{"model.layers.0.self_attn.o_proj.input": 0.004, "model.layers.0.mlp.down_proj.input": 0.02},
		{"model.layers.0.mlp.down_proj.input": 0.02},
	} {
		params, _ := json.Marshal(EvalParams{Sequences: seqs, W4A: model.W4ANVFP4, Attention: model.W4AFP8, Scales: bad})
		if _, err := evalOp(context.Background(), env, "", params); err == nil || !strings.Contains(err.Error(), "rule scales-producers") {
			t.Errorf("scales %v under the mixed policy: %v", bad, err)
		}
	}
}
