package model

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/synth"
)

func load(t testing.TB, s synth.LlamaSpec, w map[string]synth.Matrix, storage string) *Model {
	t.Helper()
	return loadOn(t, s, w, storage, cpu.New())
}

// loadOn writes the synthetic Llama in a storage format and loads it as a
// Model on a backend.
func loadOn(t testing.TB, s synth.LlamaSpec, w map[string]synth.Matrix, storage string, be kernels.W4A) *Model {
	t.Helper()
	m, err := New(loadRepo(t, llamaRepo(t, s, w, storage)), be)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var testTokens = []int{1, 17, 300, 511, 0, 42, 42, 7, 128, 255, 3, 99}

// relRMS is RMS(got − want) / RMS(want).
func relRMS(got kernels.Matrix, want [][]float64) float64 {
	var d, n float64
	for t := range want {
		for v := range want[t] {
			e := float64(got.Data[t*got.Cols+v]) - want[t][v]
			d += e * e
			n += want[t][v] * want[t][v]
		}
	}
	return math.Sqrt(d / n)
}

// The float32 forward against the float64 one: float32 rounding over 2
// layers of 256-wide sums stays within 1e-5 of the logits' RMS.
const denseTol = 1e-5

func TestDenseForwardMatchesPlainReference(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*synth.LlamaSpec)
	}{
		{"llama3 rope, GQA, untied", func(*synth.LlamaSpec) {}},
		{"hidden 512, 3 layers, 8 heads over 2", func(s *synth.LlamaSpec) {
			s.Hidden, s.Inter, s.Layers, s.Heads, s.KVHeads, s.Seed = 512, 1024, 3, 8, 2, 902
		}},
		{"plain rope, tied, MHA, biases", func(s *synth.LlamaSpec) {
			s.Llama3Scaling, s.Tied, s.KVHeads, s.RopeTheta, s.AttentionBias = false, true, 4, 10000, true
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := synth.SmallLlama()
			c.mod(&s)
			w := synth.LlamaWeights(s)
			m := load(t, s, w, "f32")
			var steps []int64
			got, err := m.Forward(context.Background(), testTokens, Options{Progress: func(done, total int64) {
				if total != int64(s.Layers+2) {
					t.Errorf("progress total %d, want %d", total, s.Layers+2)
				}
				steps = append(steps, done)
			}})
			if err != nil {
				t.Fatal(err)
			}
			if got.Rows != len(testTokens) || got.Cols != s.Vocab {
				t.Fatalf("logits [%d, %d], want [%d, %d]", got.Rows, got.Cols, len(testTokens), s.Vocab)
			}
			if len(steps) != s.Layers+2 || steps[len(steps)-1] != int64(s.Layers+2) {
				t.Fatalf("progress steps %v", steps)
			}
			want := refForward(s, w, refDense(w), testTokens)
			e := relRMS(got, want)
			if e > denseTol {
				t.Fatalf("relative RMS error %g against the plain float64 forward, want ≤ %g", e, denseTol)
			}
			// The tolerance tells the rotary details apart: the reference
			// with llama3 scaling flipped is far outside it.
			s2 := s
			s2.Llama3Scaling = !s.Llama3Scaling
			off := relRMS(got, refForward(s2, w, refDense(w), testTokens))
			t.Logf("relative RMS error %.3g; with llama3 scaling flipped %.3g", e, off)
			if off < 100*denseTol {
				t.Fatalf("the reference with llama3 scaling flipped is only %g off", off)
			}
		})
	}
}

func TestBF16ForwardReadsStoredValues(t *testing.T) {
	s := synth.SmallLlama()
	w := synth.LlamaWeights(s)
	m := load(t, s, w, "bf16")
	rounded := map[string]synth.Matrix{}
	for k, v := range w {
		d := make([]float32, len(v.Data))
		for i, x := range v.Data {
			d[i] = numeric.BF16ToFloat32(numeric.Float32ToBF16(x))
		}
		rounded[k] = synth.Matrix{Shape: v.Shape, Data: d}
	}
	got, err := m.Forward(context.Background(), testTokens, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if e := relRMS(got, refForward(s, rounded, refDense(rounded), testTokens)); e > denseTol {
		t.Fatalf("relative RMS error %g against the plain forward of the BF16 values", e)
	}
}

func TestCausality(t *testing.T) {
	s := synth.SmallLlama()
	m := load(t, s, synth.LlamaWeights(s), "bf16")
	a, err := m.Forward(context.Background(), testTokens, Options{})
	if err != nil {
		t.Fatal(err)
	}
	changed := append([]int(nil), testTokens...)
	const at = 6
	changed[at] = 400
	b, err := m.Forward(context.Background(), changed, Options{})
	if err != nil {
		t.Fatal(err)
	}
	V := s.Vocab
	for i := 0; i < at*V; i++ {
		if math.Float32bits(a.Data[i]) != math.Float32bits(b.Data[i]) {
			t.Fatalf("changing token %d changed logit %d of position %d", at, i%V, i/V)
		}
	}
	for p := at; p < len(testTokens); p++ {
		same := true
		for v := 0; v < V; v++ {
			same = same && a.Data[p*V+v] == b.Data[p*V+v]
		}
		if same {
			t.Fatalf("changing token %d left position %d's logits unchanged", at, p)
		}
	}
}

// gptqCentred unpacks a GPTQ module plainly: qweight [in/8, out], input 8r+k
// in bits 4k of word r; scales F16 [in/128, out].
func gptqCentred(t *testing.T, m *Model, name string) ([]int8, []float64, [2]int) {
	mod, _ := m.c.Module(name)
	out, in := mod.Matrix2D()
	qi, _ := mod.Info("qweight")
	qb, err := m.c.ReadTensor(qi.Name, 0, int64(qi.NBytes))
	if err != nil {
		t.Fatal(err)
	}
	codes := make([]int8, out*in)
	for r := 0; r < int(in)/8; r++ {
		for o := 0; o < int(out); o++ {
			word := binary.LittleEndian.Uint32(qb[4*(r*int(out)+o):])
			for k := 0; k < 8; k++ {
				codes[o*int(in)+8*r+k] = int8((word>>(4*k))&15) - 8
			}
		}
	}
	si, _ := mod.Info("scales")
	sb, err := m.c.ReadTensor(si.Name, 0, int64(si.NBytes))
	if err != nil {
		t.Fatal(err)
	}
	G := int(in) / 128
	sc := make([]float64, int(out)*G)
	for g := 0; g < G; g++ {
		for o := 0; o < int(out); o++ {
			sc[o*G+g] = float64(numeric.F16ToFloat32(binary.LittleEndian.Uint16(sb[2*(g*int(out)+o):])))
		}
	}
	return codes, sc, [2]int{int(out), int(in)}
}

func TestDynamicForwards(t *testing.T) {
	m, s, deq, codes, scales, dims := gptqFixture(t)
	ctx := context.Background()
	none, err := m.Forward(ctx, testTokens, Options{W4A: W4ANone})
	if err != nil {
		t.Fatal(err)
	}
	// The plain unpacking agrees with the dequantized values.
	for name, c := range codes {
		sc, d, vals := scales[name], dims[name], deq[name].Data
		for o := 0; o < d[0]; o++ {
			for i := 0; i < d[1]; i++ {
				if want := float32(float32(sc[o*(d[1]/128)+i/128]) * float32(c[o*d[1]+i])); vals[o*d[1]+i] != want {
					t.Fatalf("%s[%d][%d]: dequantized %v, scale·c %v", name, o, i, vals[o*d[1]+i], want)
				}
			}
		}
	}
	// The dense forward of the dequantized weights, written as an F32 repo.
	if len(codes) != 7*s.Layers {
		t.Fatalf("%d GPTQ modules, want %d", len(codes), 7*s.Layers)
	}
	twin := load(t, s, deq, "f32")
	dense, err := twin.Forward(ctx, testTokens, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range dense.Data {
		if math.Float32bits(dense.Data[i]) != math.Float32bits(none.Data[i]) {
			t.Fatalf("--w4a none logit %d = %v, the dense forward of the dequantized weights gives %v", i, none.Data[i], dense.Data[i])
		}
	}

	fp8, err := m.Forward(ctx, testTokens, Options{W4A: W4AFP8})
	if err != nil {
		t.Fatal(err)
	}
	refDenseQ := refForward(s, deq, refDense(deq), testTokens)
	refFP8 := refForward(s, deq, refW4AFP8(codes, scales, dims), testTokens)
	effect := relRMS(kernels.Matrix{Rows: len(refDenseQ), Cols: s.Vocab, Data: flat(refDenseQ)}, refFP8)
	e := relRMS(fp8, refFP8)
	t.Logf("W4A-FP8 against its plain reference: relative RMS %.3g; the FP8 activations themselves move the logits by %.3g", e, effect)
	// Float32 against float64 upstream may flip an occasional E4M3 rounding;
	// the tolerance (1e-4) is far below what the quantization itself changes.
	if effect < 1e-2 || e > 1e-4 {
		t.Fatalf("W4A-FP8 logits off the plain quantized arithmetic by %g (the quantization's own effect %g)", e, effect)
	}
	if relRMS(none, refFP8) < effect/2 {
		t.Fatal("the W4A-FP8 reference does not tell the dense path apart")
	}
}

func flat(x [][]float64) []float32 {
	var out []float32
	for _, r := range x {
		for _, v := range r {
			out = append(out, float32(v))
		}
	}
	return out
}

func TestBadInputs(t *testing.T) {
	s := synth.SmallLlama()
	w := synth.LlamaWeights(s)
	m := load(t, s, w, "bf16")
	ctx := context.Background()
	_, err := m.Forward(ctx, []int{1, 512}, Options{})
	var te *TokenError
	if !errors.As(err, &te) || te.Position != 1 || !strings.Contains(err.Error(), "vocab_size 512") {
		t.Fatalf("token 512: err = %v", err)
	}
	if _, err := m.Forward(ctx, []int{-1}, Options{}); err == nil {
		t.Fatal("token -1 accepted")
	}
	if _, err := m.Forward(ctx, make([]int, 3<<20), Options{}); err == nil || !strings.Contains(err.Error(), "split the sequence") {
		t.Fatalf("3 Mi tokens: err = %v", err)
	}
	if _, err := m.Forward(ctx, nil, Options{}); err == nil {
		t.Fatal("no tokens accepted")
	}
	_, err = m.Forward(ctx, []int{1}, Options{W4A: W4AFP8})
	var we *kernels.W4AError
	if !errors.As(err, &we) || !strings.Contains(err.Error(), "model.layers.0.self_attn.q_proj") || !strings.Contains(err.Error(), "GPTQ INT4") {
		t.Fatalf("--w4a fp8 on BF16: err = %v", err)
	}
	if _, err := m.Forward(ctx, []int{1}, Options{W4A: "nvfp4"}); err == nil || !strings.Contains(err.Error(), "GPTQ INT4") {
		t.Fatalf("--w4a nvfp4 on BF16: err = %v", err)
	}
	ctxC, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Forward(ctxC, []int{1, 2}, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err = %v", err)
	}
	// The demo's asymmetric GPTQ repo is refused for W4A, naming the rule.
	repo := synth.GPTQInt4()
	dir := t.TempDir()
	if err := repo.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	src, _ := hub.OpenLocal(dir)
	c, err := checkpoint.Load(ctx, src, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	am, err := New(c, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := am.Forward(ctx, []int{1, 2}, Options{W4A: W4AFP8}); err == nil || !strings.Contains(err.Error(), "sym") {
		t.Fatalf("asymmetric GPTQ with --w4a fp8: err = %v", err)
	}
	if _, err := ParseConfig([]byte(`{"model_type":"qwen2","hidden_size":8}`)); err == nil || !strings.Contains(err.Error(), "Llama") {
		t.Fatalf("qwen2 config: err = %v", err)
	}
}
