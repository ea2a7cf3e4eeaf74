package model

import (
	"context"
	"errors"
	"fmt"
	"github.com/quantscope/quantscope/formats/anatomy"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
)

// W4A modes of the forward.
const (
	W4ANone = "none" // every linear in float32, quantized weights dequantized
	W4AFP8  = "fp8"  // the seven projections as W4A-FP8 linears (GPTQ INT4 weights)
	// W4ANVFP4 is GPT-QModel's W4A-NVFP4 Llama stream (stream.go).
	W4ANVFP4 = "nvfp4"
)

// Options tune a forward.
type Options struct {
	W4A string // W4ANone (or ""), W4AFP8 or W4ANVFP4
	// Attention is the attention policy of the W4A stream (input norm,
	// q/k/v, o_proj): "" follows W4A; W4AFP8 with W4A nvfp4 is the mixed
	// policy (attention FP8, MLP NVFP4).
	Attention string
	// Recipe is the NVFP4 activation recipe (default least_squares).
	Recipe string
	// Scales are calibrated NVFP4 global scales by producer name (a
	// producer_maximum report's global_scales); a producer without one is
	// quantized with the dynamic, non-causal scale of its whole operand.
	Scales map[string]float32
	// Observe, when set, sees every producer's value before quantization
	// (stream.go's Producers); an error stops the forward and is returned
	// (ErrStop stops a RunLayer quietly).
	Observe func(producer string, x kernels.Matrix) error
	// LinearInput, when set, sees each projection's float32 input.
	LinearInput func(module string, x kernels.Matrix)
	// Weights, when set, keeps the projections a forward reads, so that
	// many runs of one layer (calibration) read its weights once; nil
	// reads, uses and drops each (the streamed forward).
	Weights *WeightCache
	// Progress is told after the embedding, each decoder layer and the head:
	// done out of Layers+2.
	Progress kernels.Progress
}

// Model is a Llama decoder over a loaded checkpoint; its weights stay in the
// checkpoint until a forward reads them.
type Model struct {
	Config *Config
	c      *checkpoint.Checkpoint
	be     kernels.W4A
	ops    kernels.LlamaOps // be's, when it has them; else the CPU's
	inv    []float32        // the rotary inverse frequencies (llama3-scaled)
}

var projections = anatomy.LlamaProjections

// New reads the checkpoint's config.json and checks that every tensor the
// forward needs is there with the shape the config implies (headers only).
func New(c *checkpoint.Checkpoint, be kernels.W4A) (*Model, error) {
	cfg, err := ParseConfig(c.Config)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, c: c, be: be, inv: cfg.InvFreq()}
	if ops, ok := be.(kernels.LlamaOps); ok {
		m.ops = ops
	} else {
		m.ops = cpu.New()
	}
	if err := m.checkModules(); err != nil {
		return nil, err
	}
	return m, nil
}

// checkModules checks, headers only, that every module the forward reads is
// there with the shape config.json implies, and each projection's bias
// against its architecture's rule: the embedding, the final norm and the
// head, then the layers in order, so that a config claiming more layers
// than are stored stops at the first missing module, having made nothing
// the size of num_hidden_layers.
func (m *Model) checkModules() error {
	cfg := m.Config
	H := cfg.Hidden
	if err := m.checkModule("model.embed_tokens", cfg.Vocab, H, ""); err != nil {
		return err
	}
	if err := m.checkModule("model.norm", 1, H, ""); err != nil {
		return err
	}
	if !cfg.Tied {
		if err := m.checkModule("lm_head", cfg.Vocab, H, ""); err != nil {
			return err
		}
	}
	for l := range cfg.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		of := fmt.Sprintf(" (layer %d of num_hidden_layers %d)", l, cfg.Layers)
		for _, n := range []string{"input_layernorm", "post_attention_layernorm"} {
			if err := m.checkModule(p+n, 1, H, of); err != nil {
				return err
			}
		}
		for _, proj := range projections {
			rows, cols := m.projectionShape(proj)
			if err := m.checkModule(p+proj, rows, cols, of); err != nil {
				return err
			}
			if err := m.checkBias(p + proj); err != nil {
				return err
			}
		}
	}
	return nil
}

// projectionShape is a projection's [out, in] as config.json implies it.
func (m *Model) projectionShape(proj string) (rows, cols int) {
	cfg := m.Config
	H, q, kv := cfg.Hidden, cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	switch proj {
	case "self_attn.q_proj":
		return q, H
	case "self_attn.k_proj", "self_attn.v_proj":
		return kv, H
	case "self_attn.o_proj":
		return H, q
	case "mlp.down_proj":
		return H, cfg.Inter
	}
	return cfg.Inter, H // gate_proj, up_proj
}

// checkModule checks that the module name has a weight of [rows, cols];
// where says which layer wants it ("" for the others).
func (m *Model) checkModule(name string, rows, cols int, where string) error {
	src := m.c.Source.Name()
	mod, ok := m.c.Module(name)
	if !ok || mod.Name != name || mod.Format == scheme.FormatNone {
		return fmt.Errorf("%s: no weight for module %q, which config.json's Llama shape needs%s", src, name, where)
	}
	r, c := mod.Matrix2D()
	if int(r) != rows || int(c) != cols {
		return fmt.Errorf("%s: module %q is [%d, %d], config.json implies [%d, %d]", src, name, r, c, rows, cols)
	}
	return nil
}

// MemoryBound is the most heap a forward of T tokens needs, in bytes: the
// largest decoder layer's weights at 5 bytes a parameter (float32 plus an
// unpacked code) plus their stored bytes; one chunk of the head likewise;
// the activations of T tokens (residual, norms, q/k/v and their rotated
// copies with the RoPE tables, attention, MLP and SwiGLU's output, W4A
// codes: the backend's LlamaOps return new matrices); the attention scores
// of one row per head; and the logits.
func (m *Model) MemoryBound(T int) int64 {
	cfg := m.Config
	var layer int64
	for l := range cfg.Layers {
		var b int64
		p := fmt.Sprintf("model.layers.%d.", l)
		for _, n := range append([]string{"input_layernorm", "post_attention_layernorm"}, projections...) {
			if mod, ok := m.c.Module(p + n); ok {
				b += 5*int64(mod.Parameters) + int64(mod.Bytes)
			}
		}
		layer = max(layer, b)
	}
	head := m.headModule()
	hb := int64(m.headChunk()) * int64(cfg.Hidden) * 5
	if head.Parameters > 0 {
		hb += int64(head.Bytes) / int64(cfg.Vocab) * int64(m.headChunk())
	}
	q, kv := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	t := int64(T)
	act := 4 * t * int64(6*cfg.Hidden+2*q+4*kv+4*cfg.Inter+2*max(cfg.Hidden, cfg.Inter)+cfg.HeadDim)
	act += 4 * t * int64(q+kv+cfg.Inter+2*cfg.HeadDim) // RoPE's copies of q and k and its cos/sin tables (twice), SwiGLU's output
	scores := 4 * int64(cfg.Heads) * t
	logits := 4 * t * int64(cfg.Vocab+m.headChunk())
	return layer + hb + act + scores + logits
}

func (m *Model) headModule() *scheme.Module {
	name := "lm_head"
	if m.Config.Tied {
		name = "model.embed_tokens"
	}
	mod, _ := m.c.Module(name)
	return mod
}

// headChunk is how many vocabulary rows of the head are dequantized at once.
func (m *Model) headChunk() int {
	return min(m.Config.Vocab, max(256, (16<<20)/m.Config.Hidden))
}

// maxLogitBytes bounds the logits one forward returns (float32 [T, vocab]).
const maxLogitBytes = 4 << 30

// TokenError is a token id the model cannot embed.
type TokenError struct {
	Position, ID, Vocab int
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("token %d at position %d is outside the vocabulary (vocab_size %d)", e.ID, e.Position, e.Vocab)
}

// Forward returns the logits [T, vocab] of every position of one sequence.
func (m *Model) Forward(ctx context.Context, tokens []int, opt Options) (kernels.Matrix, error) {
	cfg := m.Config
	if len(tokens) == 0 {
		return kernels.Matrix{}, errors.New("forward: no tokens given")
	}
	if need := int64(len(tokens)) * int64(cfg.Vocab) * 4; need > maxLogitBytes {
		return kernels.Matrix{}, fmt.Errorf("forward: %d tokens × %d logits need %d MiB, over the %d MiB a forward may return; split the sequence", len(tokens), cfg.Vocab, need>>20, maxLogitBytes>>20)
	}
	for i, id := range tokens {
		if id < 0 || id >= cfg.Vocab {
			return kernels.Matrix{}, &TokenError{Position: i, ID: id, Vocab: cfg.Vocab}
		}
	}
	st, err := m.newStream(opt)
	if err != nil {
		return kernels.Matrix{}, err
	}
	progress := func(done int) {
		if opt.Progress != nil {
			opt.Progress(int64(done), int64(cfg.Layers+2))
		}
	}
	h, err := m.Embed(tokens)
	if err != nil {
		return kernels.Matrix{}, err
	}
	progress(1)
	for l := range cfg.Layers {
		if err := ctx.Err(); err != nil {
			return kernels.Matrix{}, err
		}
		if err := m.layer(ctx, l, h, st); err != nil {
			return kernels.Matrix{}, err
		}
		progress(l + 2)
	}
	x, err := m.norm(ctx, "model.norm", h)
	if err != nil {
		return kernels.Matrix{}, err
	}
	logits, err := m.head(ctx, x)
	if err != nil {
		return kernels.Matrix{}, err
	}
	progress(cfg.Layers + 2)
	return logits, nil
}

// layer runs decoder layer l in place on the residual stream h. In W4A
// mode q/k/v share one quantized operand (the input norm's output) and
// gate/up another (the post-attention norm's), as GPT-QModel's stream packs
// each once; the producers of NUMERICS.md are observed where they arise.
func (m *Model) layer(ctx context.Context, l int, h kernels.Matrix, st *stream) error {
	cfg := m.Config
	p := fmt.Sprintf("model.layers.%d.", l)
	if l == 0 {
		if err := st.observe(p+"input", h); err != nil {
			return err
		}
	}
	x, err := m.norm(ctx, p+"input_layernorm", h)
	if err != nil {
		return err
	}
	qkv, err := st.operand(ctx, x, st.attn, "", p+"self_attn.q_proj/k_proj/v_proj")
	if err != nil {
		return err
	}
	var out [3]kernels.Matrix
	for i, n := range projections[:3] {
		if out[i], err = m.linear(ctx, p+n, qkv, st); err != nil {
			return err
		}
	}
	q, k, v := out[0], out[1], out[2]
	if q, err = m.ops.RoPE(ctx, q, cfg.Heads, cfg.HeadDim, m.inv); err != nil {
		return err
	}
	if k, err = m.ops.RoPE(ctx, k, cfg.KVHeads, cfg.HeadDim, m.inv); err != nil {
		return err
	}
	att, err := m.ops.Attention(ctx, q, k, v, cfg.Heads, cfg.KVHeads, cfg.HeadDim)
	if err != nil {
		return err
	}
	if err := st.observe(p+"self_attn.o_proj.input", att); err != nil {
		return err
	}
	a, err := st.operand(ctx, att, st.attn, p+"self_attn.o_proj.input", p+"self_attn.o_proj")
	if err != nil {
		return err
	}
	o, err := m.linear(ctx, p+"self_attn.o_proj", a, st)
	if err != nil {
		return err
	}
	addInto(h, o)
	if err := st.observe(p+"post_attention_residual", h); err != nil {
		return err
	}
	if x, err = m.norm(ctx, p+"post_attention_layernorm", h); err != nil {
		return err
	}
	gu, err := st.operand(ctx, x, st.mlp, "", p+"mlp.gate_proj/up_proj")
	if err != nil {
		return err
	}
	g, err := m.linear(ctx, p+"mlp.gate_proj", gu, st)
	if err != nil {
		return err
	}
	u, err := m.linear(ctx, p+"mlp.up_proj", gu, st)
	if err != nil {
		return err
	}
	if g, err = m.ops.SwiGLU(ctx, g, u); err != nil {
		return err
	}
	if err := st.observe(p+"mlp.down_proj.input", g); err != nil {
		return err
	}
	prod, err := st.operand(ctx, g, st.mlp, p+"mlp.down_proj.input", p+"mlp.down_proj")
	if err != nil {
		return err
	}
	d, err := m.linear(ctx, p+"mlp.down_proj", prod, st)
	if err != nil {
		return err
	}
	addInto(h, d)
	return st.observe(p+"output", h)
}

func addInto(h, d kernels.Matrix) {
	for i, v := range d.Data {
		h.Data[i] += v
	}
}

// norm is HF's LlamaRMSNorm in float32 with the module's weight.
func (m *Model) norm(ctx context.Context, name string, x kernels.Matrix) (kernels.Matrix, error) {
	mod, _ := m.c.Module(name)
	w, err := scheme.Dequantize(mod, m.c, 0, 1)
	if err != nil {
		return kernels.Matrix{}, err
	}
	return m.ops.RMSNorm(ctx, x, w, float32(m.Config.Eps))
}

// linear reads one projection, applies it to its operand, and lets it go.
func (m *Model) linear(ctx context.Context, name string, op operand, st *stream) (kernels.Matrix, error) {
	if st.opt.LinearInput != nil {
		st.opt.LinearInput(name, op.x)
	}
	w4a := op.fp8 != nil || op.nvfp4 != nil
	lw, err := st.opt.Weights.get(name, w4a, func() (layerWeight, error) { return m.readLinear(name, w4a) })
	if err != nil {
		return kernels.Matrix{}, err
	}
	switch {
	case op.nvfp4 != nil:
		return m.be.W4ANVFP4Linear(ctx, op.nvfp4, lw.w4a)
	case op.fp8 != nil:
		return m.be.W4AFP8Linear(ctx, op.fp8, lw.w4a)
	}
	return m.be.LinearF32(ctx, op.x, lw.dense, lw.bias)
}

// readLinear reads one projection's weight: the W4A codes, or the float32
// values.
func (m *Model) readLinear(name string, w4a bool) (layerWeight, error) {
	mod, _ := m.c.Module(name)
	bias, err := m.bias(mod)
	if err != nil {
		return layerWeight{}, err
	}
	if w4a {
		w, err := m.w4aWeight(mod, bias)
		return layerWeight{w4a: w}, err
	}
	rows, cols := mod.Matrix2D()
	w, err := scheme.Dequantize(mod, m.c, 0, int(rows))
	if err != nil {
		return layerWeight{}, err
	}
	// An AWQ pre_quant_scale multiplies the input: folded into the weight.
	if err := scheme.FoldPreQuantScale(mod, m.c, w); err != nil {
		return layerWeight{}, err
	}
	return layerWeight{dense: kernels.Matrix{Rows: int(rows), Cols: int(cols), Data: w}, bias: bias}, nil
}

// head is the LM head (or the tied embedding) over x, a chunk of vocabulary
// rows at a time. It has no bias in any architecture the forward runs; a
// stored one is not used, as Hugging Face ignores unexpected weights.
func (m *Model) head(ctx context.Context, x kernels.Matrix) (kernels.Matrix, error) {
	mod := m.headModule()
	V, H, T := m.Config.Vocab, m.Config.Hidden, x.Rows
	logits := kernels.Matrix{Rows: T, Cols: V, Data: make([]float32, T*V)}
	step := m.headChunk()
	for lo := 0; lo < V; lo += step {
		hi := min(lo+step, V)
		w, err := scheme.Dequantize(mod, m.c, lo, hi)
		if err != nil {
			return kernels.Matrix{}, err
		}
		y, err := m.be.LinearF32(ctx, x, kernels.Matrix{Rows: hi - lo, Cols: H, Data: w}, nil)
		if err != nil {
			return kernels.Matrix{}, err
		}
		for t := range T {
			copy(logits.Data[t*V+lo:t*V+hi], y.Data[t*(hi-lo):(t+1)*(hi-lo)])
		}
	}
	return logits, nil
}
