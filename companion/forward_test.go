package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/model"
	"github.com/quantscope/quantscope/synth"
	"github.com/quantscope/quantscope/tokenizer"
)

// llamaRepos writes the small generated Llama as GPTQ and BF16 checkpoints.
func llamaRepos(t *testing.T) (gptq, bf16 string) {
	t.Helper()
	s := synth.SmallLlama()
	w := synth.LlamaWeights(s)
	dir := t.TempDir()
	for _, st := range []string{"gptq", "bf16"} {
		r, err := synth.LlamaRepo(s, w, st)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.WriteDir(filepath.Join(dir, st)); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "gptq"), filepath.Join(dir, "bf16")
}

func directForward(t *testing.T, dir string, tokens []int, mode string) []float32 {
	t.Helper()
	src, err := hub.OpenLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.Load(context.Background(), src, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := model.New(c, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Forward(context.Background(), tokens, model.Options{W4A: mode})
	if err != nil {
		t.Fatal(err)
	}
	return l.Data
}

func runOK(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if err := run(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return out.String()
}

func TestForwardCommand(t *testing.T) {
	gptq, _ := llamaRepos(t)
	tokens := []int{5, 6, 7, 500, 3}
	ids := filepath.Join(t.TempDir(), "ids.txt")
	os.WriteFile(ids, []byte("5, 6\n7\t500 3\n"), 0o644)
	for _, mode := range []string{"none", "fp8"} {
		want := directForward(t, gptq, tokens, mode)
		outFile := filepath.Join(t.TempDir(), "logits.f32")
		var doc struct {
			Shape  []int       `json:"shape"`
			Logits [][]float64 `json:"logits"`
		}
		if err := json.Unmarshal([]byte(runOK(t, "forward", "--json", "--tokens", "@"+ids, "--w4a", mode, "--out", outFile, gptq)), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Shape) != 2 || doc.Shape[0] != 5 || doc.Shape[1] != 512 || len(doc.Logits) != 5 {
			t.Fatalf("%s: shape %v, %d rows", mode, doc.Shape, len(doc.Logits))
		}
		raw, err := os.ReadFile(outFile)
		if err != nil || len(raw) != 4*len(want) {
			t.Fatalf("%s: --out holds %d bytes (%v), want %d", mode, len(raw), err, 4*len(want))
		}
		for i, w := range want {
			if got := float32(doc.Logits[i/512][i%512]); got != w {
				t.Fatalf("%s: JSON logit %d = %v, the forward gives %v", mode, i, got, w)
			}
			if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != w {
				t.Fatalf("%s: --out logit %d = %v, the forward gives %v", mode, i, got, w)
			}
		}
		text := runOK(t, "forward", "--tokens", "5,6,7,500,3", "--w4a", mode, gptq)
		if !strings.Contains(text, "logits [5, 512]") || strings.Count(text, "position ") != 5 {
			t.Fatalf("%s: text output %q", mode, text)
		}
	}
}

// nllOf is the mean next-token negative log-likelihood, written plainly.
func nllOf(logits []float32, seq []int, V int) (sum float64, n int) {
	for t := 0; t+1 < len(seq); t++ {
		var z float64
		for v := 0; v < V; v++ {
			z += math.Exp(float64(logits[t*V+v]))
		}
		sum += math.Log(z) - float64(logits[t*V+seq[t+1]])
		n++
	}
	return sum, n
}

func TestEvalCommand(t *testing.T) {
	gptq, _ := llamaRepos(t)
	seqs := [][]int{{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10}, {11}, {300, 20}}
	data := filepath.Join(t.TempDir(), "data.txt")
	os.WriteFile(data, []byte("1 2 3 4 5 6\n7,8,9,10\n\n11\n300 20\n"), 0o644)
	want := map[string]perplexity{}
	for _, mode := range []string{"none", "fp8"} {
		var sum float64
		var n int
		for _, s := range seqs {
			a, b := nllOf(directForward(t, gptq, s, mode), s, 512)
			sum, n = sum+a, n+b
		}
		want[mode] = perplexity{Tokens: n, NLL: sum / float64(n), Perplexity: math.Exp(sum / float64(n))}
		var got perplexity
		if err := json.Unmarshal([]byte(runOK(t, "eval", "--json", "--data", data, "--w4a", mode, gptq)), &got); err != nil {
			t.Fatal(err)
		}
		if got.Tokens != 9 || math.Abs(got.NLL-want[mode].NLL) > 1e-9 || math.Abs(got.Perplexity/want[mode].Perplexity-1) > 1e-9 {
			t.Fatalf("%s: eval %+v, plain computation %+v", mode, got, want[mode])
		}
	}
	var cmp struct {
		Dense, W4A perplexity
		Difference map[string]float64
		Note       string
	}
	if err := json.Unmarshal([]byte(runOK(t, "eval", "--json", "--compare", "--w4a", "fp8", "--data", data, gptq)), &cmp); err != nil {
		t.Fatal(err)
	}
	if cmp.Dense.Tokens != 9 || math.Abs(cmp.Dense.NLL-want["none"].NLL) > 1e-9 {
		t.Fatalf("compare: dense %+v, want %+v", cmp.Dense, want["none"])
	}
	if math.Abs(cmp.W4A.NLL-want["fp8"].NLL) > 1e-9 || math.Abs(cmp.Difference["nll"]-(cmp.W4A.NLL-cmp.Dense.NLL)) > 1e-12 || cmp.Difference["nll"] == 0 {
		t.Fatalf("compare: %+v, want w4a %+v", cmp, want["fp8"])
	}
	if !strings.Contains(cmp.Note, "float32") {
		t.Fatalf("compare: note %q", cmp.Note)
	}
}

func TestForwardEvalErrors(t *testing.T) {
	gptq, bf16 := llamaRepos(t)
	empty := filepath.Join(t.TempDir(), "one.txt")
	os.WriteFile(empty, []byte("4\n"), 0o644)
	bad := filepath.Join(t.TempDir(), "bad.txt")
	os.WriteFile(bad, []byte("1 2\n3 x\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"forward", "--tokens", "1,512", gptq}, "token 512 at position 1 is outside the vocabulary (vocab_size 512)"},
		{[]string{"forward", "--tokens", "1,2", "--w4a", "fp8", bf16}, `module "model.layers.0.self_attn.q_proj": rule w4a-format`},
		{[]string{"forward", "--tokens", "1,-2", gptq}, `field 2 is not a token id`},
		{[]string{"forward", gptq}, "give --tokens or --text"},
		{[]string{"forward", "--text", "hi", gptq + "/../nosuch"}, "nosuch"},
		{[]string{"forward", "--tokens", "1", "--w4a", "int8", gptq}, `--w4a "int8"`},
		{[]string{"eval", "--data", empty, gptq}, "nothing to predict"},
		{[]string{"eval", "--data", bad, gptq}, "line 2"},
		{[]string{"eval", "--data", empty, "--compare", gptq}, "--compare needs --w4a fp8"},
	} {
		stdout, stderr, code := runMain(t, c.args...)
		if code != 1 || stdout != "" || !strings.HasPrefix(stderr, "error: ") || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and an error with %q", c.args, code, stdout, stderr, c.want)
		}
	}
}

// TestForwardText: --text goes through the repo's tokenizer.json and gives
// the logits of the ids the tokenizer package produces for it.
func TestForwardText(t *testing.T) {
	gptq, bf16 := llamaRepos(t)
	text := "The model reads the tokens."
	b, err := os.ReadFile(filepath.Join(bf16, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(text, true)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"forward", "--json", "--text", text, bf16}, &out, &errb); err != nil {
		t.Fatal(err, errb.String())
	}
	var doc struct {
		Shape  []int
		Logits [][]float32
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	want := directForward(t, bf16, ids, model.W4ANone)
	if doc.Shape[0] != len(ids) || doc.Shape[1] != 512 {
		t.Fatalf("shape %v, want [%d 512]", doc.Shape, len(ids))
	}
	for i, x := range want {
		if doc.Logits[i/512][i%512] != x {
			t.Fatalf("logit %d: %v, want %v", i, doc.Logits[i/512][i%512], x)
		}
	}
	// Text lines for eval: the same perplexity as the ids written out.
	dir := t.TempDir()
	lines := []string{"The quick brown fox.", "It's what we measure."}
	var idLines []string
	for _, l := range lines {
		ids, err := tok.Encode(l, true)
		if err != nil {
			t.Fatal(err)
		}
		idLines = append(idLines, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(ids)), ","), "[]"))
	}
	txt, idf := filepath.Join(dir, "text.txt"), filepath.Join(dir, "ids.txt")
	os.WriteFile(txt, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	os.WriteFile(idf, []byte(strings.Join(idLines, "\n")+"\n"), 0o644)
	var a, bb bytes.Buffer
	if err := run(context.Background(), []string{"eval", "--json", "--text", txt, bf16}, &a, &errb); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"eval", "--json", "--data", idf, bf16}, &bb, &errb); err != nil {
		t.Fatal(err)
	}
	if a.String() != bb.String() {
		t.Errorf("eval --text %s != eval --data of its ids %s", a.String(), bb.String())
	}
	os.Remove(filepath.Join(gptq, "tokenizer.json"))
	if _, stderr, code := runMain(t, "forward", "--text", "hello", gptq); code != 1 || !strings.Contains(stderr, "no tokenizer.json to tokenize text with: give token ids with --tokens instead of --text") {
		t.Errorf("a repo without tokenizer.json: exit %d, %q", code, stderr)
	}
	// eval has no --tokens: its ids come in a --data file
	os.WriteFile(txt, []byte("hello\n"), 0o644)
	if _, stderr, code := runMain(t, "eval", "--text", txt, gptq); code != 1 || !strings.Contains(stderr, "no tokenizer.json to tokenize text with: give a file of token id lines with --data instead of --text") {
		t.Errorf("eval on a repo without tokenizer.json: exit %d, %q", code, stderr)
	}
}
