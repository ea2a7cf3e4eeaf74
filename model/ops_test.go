package model

import (
	"context"
	"math"
	"sync/atomic"
	"testing"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/synth"
)

// countingOps is a backend whose Llama ops are the CPU's, counted, and whose
// SwiGLU can be spoiled: the forward must take its ops from it.
type countingOps struct {
	*cpu.Backend
	norm, rope, attn, glu atomic.Int64
	spoil                 bool
}

func (c *countingOps) RMSNorm(ctx context.Context, x kernels.Matrix, w []float32, eps float32) (kernels.Matrix, error) {
	c.norm.Add(1)
	return c.Backend.RMSNorm(ctx, x, w, eps)
}

func (c *countingOps) RoPE(ctx context.Context, x kernels.Matrix, heads, d int, inv []float32) (kernels.Matrix, error) {
	c.rope.Add(1)
	return c.Backend.RoPE(ctx, x, heads, d, inv)
}

func (c *countingOps) Attention(ctx context.Context, q, k, v kernels.Matrix, heads, kvHeads, d int) (kernels.Matrix, error) {
	c.attn.Add(1)
	return c.Backend.Attention(ctx, q, k, v, heads, kvHeads, d)
}

func (c *countingOps) SwiGLU(ctx context.Context, g, u kernels.Matrix) (kernels.Matrix, error) {
	c.glu.Add(1)
	y, err := c.Backend.SwiGLU(ctx, g, u)
	if c.spoil {
		for i := range y.Data {
			y.Data[i] = 0
		}
	}
	return y, err
}

// w4aOnly hides the CPU backend's Llama ops: the model falls back to its own CPU ones.
type w4aOnly struct{ kernels.W4A }

func loadWith(t *testing.T, be kernels.W4A) *Model {
	t.Helper()
	s := synth.SmallLlama()
	return loadOn(t, s, synth.LlamaWeights(s), "f32", be)
}

// TestForwardTakesBackendOps: a backend with Llama ops runs every norm,
// rotation, attention and SwiGLU of the forward (the same logits as the
// CPU's when they are the CPU's); one without them gets the CPU's.
func TestForwardTakesBackendOps(t *testing.T) {
	ctx := context.Background()
	want, err := loadWith(t, w4aOnly{cpu.New()}).Forward(ctx, testTokens, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ops := &countingOps{Backend: cpu.New()}
	got, err := loadWith(t, ops).Forward(ctx, testTokens, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range want.Data {
		if math.Float32bits(got.Data[i]) != math.Float32bits(want.Data[i]) {
			t.Fatalf("logit %d: %g through the backend's ops, %g through the model's own", i, got.Data[i], want.Data[i])
		}
	}
	L := int64(synth.SmallLlama().Layers)
	if ops.norm.Load() != 2*L+1 || ops.rope.Load() != 2*L || ops.attn.Load() != L || ops.glu.Load() != L {
		t.Fatalf("backend ops ran norm %d, rope %d, attention %d, swiglu %d times; want %d, %d, %d, %d",
			ops.norm.Load(), ops.rope.Load(), ops.attn.Load(), ops.glu.Load(), 2*L+1, 2*L, L, L)
	}
	spoilt := &countingOps{Backend: cpu.New(), spoil: true}
	bad, err := loadWith(t, spoilt).Forward(ctx, testTokens, Options{})
	if err != nil {
		t.Fatal(err)
	}
	same := true
	for i := range want.Data {
		same = same && bad.Data[i] == want.Data[i]
	}
	if same {
		t.Fatal("a backend whose SwiGLU returns zeros left the logits unchanged")
	}
}
