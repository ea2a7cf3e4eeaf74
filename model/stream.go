package model

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/kernels"
)

// GPT-QModel's W4A Llama stream (w4a_llama_stream.py, w4a_boundary.py;
// NUMERICS.md part 2). The producers, in execution order, are
//
//	model.layers.0.input                     the residual stream entering layer 0
//	model.layers.{i}.self_attn.o_proj.input  the attention output
//	model.layers.{i}.post_attention_residual the residual after attention
//	model.layers.{i}.mlp.down_proj.input     silu(gate)·up
//	model.layers.{i}.output                  the residual after the MLP
//
// The residual stream is summed exactly in float32 and the norms are
// unfused (GPT-QModel's default): each norm computes from the exact residual
// and repacks its output dynamically, so the residual producers' calibrated
// scales reach no GEMM; o_proj.input and down_proj.input use theirs. An
// operand without a calibrated scale takes the amax of every token of the
// call: such a forward is not causal.

// ErrStop is what an Observe callback returns to stop a RunLayer at a
// producer (calibration observes one producer at a time).
var ErrStop = errors.New("model: stopped at a producer")

// Producers lists the NVFP4 producers of a decoder of n layers in
// calibration order (2 layers: 9).
func Producers(n int) []string {
	var p []string
	for l := range n {
		pre := fmt.Sprintf("model.layers.%d.", l)
		if l == 0 {
			p = append(p, pre+"input")
		}
		p = append(p, pre+"self_attn.o_proj.input", pre+"post_attention_residual", pre+"mlp.down_proj.input", pre+"output")
	}
	return p
}

// NVFP4Producers lists the producers whose carrier is NVFP4 under an
// attention policy, in calibration order: every producer when attention
// is NVFP4 ("" or W4ANVFP4); under the mixed policy (W4AFP8 attention)
// only the MLP's, post_attention_residual and mlp.down_proj.input, since
// FP8 carriers pack with a dynamic per-token scale and own no global scale
// (GPT-QModel's nvfp4_producer_specs, w4a_boundary.py).
func NVFP4Producers(n int, attention string) []string {
	all := Producers(n)
	if attention != W4AFP8 {
		return all
	}
	var mlp []string
	for _, p := range all {
		if strings.HasSuffix(p, ".post_attention_residual") || strings.HasSuffix(p, ".mlp.down_proj.input") {
			mlp = append(mlp, p)
		}
	}
	return mlp
}

// CheckScales refuses calibrated scales (opt.Scales, when given) that are
// not exactly the NVFP4 producers of opt's policy, as GPT-QModel's
// validate_producer_scales does: a missing producer would silently fall
// back to a dynamic scale, an extra one (a report calibrated under another
// attention policy) would be ignored.
func (m *Model) CheckScales(opt Options) error {
	if opt.Scales == nil || opt.W4A != W4ANVFP4 {
		return nil
	}
	want := NVFP4Producers(m.Config.Layers, opt.Attention)
	var missing, extra []string
	for _, p := range want {
		if _, ok := opt.Scales[p]; !ok {
			missing = append(missing, p)
		}
	}
	known := map[string]bool{}
	for _, p := range want {
		known[p] = true
	}
	for p := range opt.Scales {
		if !known[p] {
			extra = append(extra, p)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return nil
	}
	slices.Sort(extra)
	policy := "NVFP4 attention and MLP"
	if opt.Attention == W4AFP8 {
		policy = "FP8 attention, NVFP4 MLP (the mixed policy)"
	}
	how := "calibrate --pass act_max"
	if opt.Attention == W4AFP8 {
		how += " --attention fp8"
	}
	return fmt.Errorf("scales: rule scales-producers: the calibrated scales must name exactly the %d NVFP4 producers of %s (GPT-QModel refuses any other set): missing %s, extra %s; %s calibrates them",
		len(want), policy, fewNames(missing), fewNames(extra), how)
}

// fewNames lists up to 4 names and counts the rest.
func fewNames(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	if len(names) > 4 {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:4], ", "), len(names)-4)
	}
	return strings.Join(names, ", ")
}

// stream is one forward's W4A policy.
type stream struct {
	opt       Options
	attn, mlp string // W4ANone, W4AFP8 or W4ANVFP4
	recipe    string
	be        kernels.W4A
}

func (m *Model) newStream(opt Options) (*stream, error) {
	st := &stream{opt: opt, be: m.be, recipe: opt.Recipe}
	if st.recipe == "" {
		st.recipe = kernels.ActLeastSquares
	}
	switch opt.W4A {
	case "", W4ANone:
		st.attn, st.mlp = W4ANone, W4ANone
		if opt.Attention != "" && opt.Attention != W4ANone {
			return nil, fmt.Errorf("forward: --attention %s needs --w4a nvfp4", opt.Attention)
		}
		return st, nil
	case W4AFP8, W4ANVFP4:
		st.attn, st.mlp = opt.W4A, opt.W4A
	default:
		return nil, fmt.Errorf("forward: --w4a %q: want none, fp8 or nvfp4", opt.W4A)
	}
	switch opt.Attention {
	case "":
	case W4AFP8, W4ANVFP4:
		if opt.W4A != W4ANVFP4 && opt.Attention != opt.W4A {
			return nil, fmt.Errorf("forward: --attention %s with --w4a %s: the mixed policy is --w4a nvfp4 --attention fp8", opt.Attention, opt.W4A)
		}
		st.attn = opt.Attention
	default:
		return nil, fmt.Errorf("forward: --attention %q: want fp8 or nvfp4", opt.Attention)
	}
	if st.attn == W4ANVFP4 || st.mlp == W4ANVFP4 {
		if err := kernels.CheckActRecipe(st.recipe); err != nil {
			return nil, fmt.Errorf("forward: --recipe: %w", err)
		}
	} else if opt.Recipe != "" {
		return nil, fmt.Errorf("forward: --recipe %s applies to NVFP4 activations (--w4a nvfp4)", opt.Recipe)
	}
	known := map[string]bool{}
	for _, p := range Producers(m.Config.Layers) {
		known[p] = true
	}
	for name, g := range opt.Scales {
		if !known[name] {
			return nil, fmt.Errorf("forward: --scales names producer %q, which this %d-layer model does not have", name, m.Config.Layers)
		}
		if !(g > 0) || g != g || g > 3.4e38 {
			return nil, fmt.Errorf("forward: --scales: producer %q has global scale %v; it must be positive and finite", name, g)
		}
	}
	if err := m.checkW4A(); err != nil {
		return nil, err
	}
	if st.attn == W4ANVFP4 || st.mlp == W4ANVFP4 {
		// install_w4a_llama_stream (w4a_llama_stream.py:403)
		for l := range m.Config.Layers {
			for _, p := range projections {
				mod, _ := m.c.Module(fmt.Sprintf("model.layers.%d.%s", l, p))
				if rows, _ := mod.Matrix2D(); rows%128 != 0 {
					return nil, &kernels.W4AError{Module: mod.Name, Rule: "w4a-stream-shape", Msg: fmt.Sprintf("out_features %d is not a multiple of 128, which GPT-QModel's NVFP4 Llama stream requires", rows)}
				}
			}
		}
	}
	return st, nil
}

func (st *stream) observe(producer string, x kernels.Matrix) error {
	if st.opt.Observe == nil {
		return nil
	}
	return st.opt.Observe(producer, x)
}

// operand is a linear's input: the float32 activation, and in W4A mode its
// quantized form.
type operand struct {
	x     kernels.Matrix
	fp8   *kernels.FP8Tokens
	nvfp4 *kernels.NVFP4Tokens
}

// operand quantizes x under a policy; producer names the calibrated scale
// it may use ("" for the norm outputs, which repack dynamically).
func (st *stream) operand(ctx context.Context, x kernels.Matrix, policy, producer, consumers string) (operand, error) {
	var op operand
	var err error
	op.x = x
	switch policy {
	case W4AFP8:
		op.fp8, err = st.be.W4AFP8Quantize(ctx, x)
	case W4ANVFP4:
		g := st.opt.Scales[producer] // 0 when absent: dynamic
		if producer == "" {
			g = 0
		}
		op.nvfp4, err = st.be.W4ANVFP4Quantize(ctx, x, st.recipe, g)
	}
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("the input of %s: %w", consumers, err)
	}
	return op, err
}

// Embed returns the residual stream entering layer 0: the embedding rows of
// the tokens, float32 [T, hidden]. Token ids must be in the vocabulary.
func (m *Model) Embed(tokens []int) (kernels.Matrix, error) {
	H := m.Config.Hidden
	h := kernels.Matrix{Rows: len(tokens), Cols: H, Data: make([]float32, len(tokens)*H)}
	for t, id := range tokens {
		if id < 0 || id >= m.Config.Vocab {
			return kernels.Matrix{}, &TokenError{Position: t, ID: id, Vocab: m.Config.Vocab}
		}
	}
	embed, _ := m.c.Module("model.embed_tokens")
	if embed.PackedInputs() {
		return h, m.gatherEmbed(embed, tokens, h)
	}
	for t, id := range tokens {
		row, err := scheme.Dequantize(embed, m.c, id, id+1)
		if err != nil {
			return kernels.Matrix{}, err
		}
		copy(h.Data[t*H:], row)
	}
	return h, nil
}

// gatherEmbed fills h with the tokens' rows of an embedding packed along
// the hidden dimension (GPTQ, AWQ), where every vocabulary row shares each
// stored word, so one row costs as much as the whole tensor: it dequantizes
// windows of hidden columns over the whole vocabulary, each stored word
// once, and copies out the tokens' parts of each.
func (m *Model) gatherEmbed(embed *scheme.Module, tokens []int, h kernels.Matrix) error {
	V, H := m.Config.Vocab, m.Config.Hidden
	step := m.embedWindow()
	for c0 := 0; c0 < H; c0 += step {
		c1 := min(c0+step, H)
		w, err := scheme.DequantizeWindow(embed, m.c, 0, V, c0, c1)
		if err != nil {
			return err
		}
		n := c1 - c0
		for t, id := range tokens {
			copy(h.Data[t*H+c0:t*H+c1], w[id*n:(id+1)*n])
		}
	}
	return nil
}

// embedValues is about how many values gatherEmbed dequantizes at once,
// as many as a chunk of the head (a variable so that a test can make the
// windows narrower than its small model's hidden size).
var embedValues = 16 << 20

// embedWindow is how many hidden columns of a packed embedding
// gatherEmbed dequantizes at once: embedValues over the vocabulary, in
// multiples of 32 columns (whole words at 2, 3, 4 and 8 bits).
func (m *Model) embedWindow() int {
	w := embedValues / m.Config.Vocab
	return min(m.Config.Hidden, max(32, w/32*32))
}

// RunLayer runs decoder layer l in place on the residual stream h (one
// sequence of h.Rows tokens) under opt's W4A policy. An Observe callback
// returning ErrStop ends it early with a nil error, h then only partly
// updated (calibration observes and discards).
func (m *Model) RunLayer(ctx context.Context, l int, h kernels.Matrix, opt Options) error {
	if l < 0 || l >= m.Config.Layers || h.Cols != m.Config.Hidden || len(h.Data) != h.Rows*h.Cols {
		return fmt.Errorf("model: RunLayer(%d) on [%d, %d] of a %d-layer model of hidden %d", l, h.Rows, h.Cols, m.Config.Layers, m.Config.Hidden)
	}
	st, err := m.newStream(opt)
	if err != nil {
		return err
	}
	err = m.layer(ctx, l, h, st)
	if errors.Is(err, ErrStop) {
		return nil
	}
	return err
}

// Causal says whether a forward under opt is causal: not when an NVFP4
// operand takes its global scale from every token of the call (no
// calibrated scale for o_proj.input / down_proj.input, and always for the
// norm outputs, which repack dynamically).
func Causal(opt Options) bool {
	return opt.W4A != W4ANVFP4
}

// Checkpoint is the checkpoint the model reads its weights from.
func (m *Model) Checkpoint() *checkpoint.Checkpoint { return m.c }

// WeightCache holds projections read by RunLayer/Forward calls that share
// it: calibration keeps one per layer (its memory is that layer's weights)
// and drops it before the next.
type WeightCache struct {
	m map[string]layerWeight
}

// NewWeightCache returns an empty cache.
func NewWeightCache() *WeightCache { return &WeightCache{m: map[string]layerWeight{}} }

type layerWeight struct {
	w4a   *kernels.W4AWeight
	dense kernels.Matrix
	bias  []float32
}

// get returns name's weight in the form asked for, read by read on a miss;
// a nil cache always reads.
func (c *WeightCache) get(name string, w4a bool, read func() (layerWeight, error)) (layerWeight, error) {
	if c == nil {
		return read()
	}
	key := name + map[bool]string{true: "#w4a", false: "#dense"}[w4a]
	if w, ok := c.m[key]; ok {
		return w, nil
	}
	w, err := read()
	if err == nil {
		c.m[key] = w
	}
	return w, err
}
