package model

import (
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
)

// The layer's rotary embedding and attention are kernels/cpu's reference
// operations (HF's float32 order; the CUDA kernels are checked against them).

// rope holds cos and sin [T, d/2] of HF's rotary embedding (cpu.Rope).
type rope = cpu.Rope

func newRope(c *Config, T int) *rope { return cpu.NewRope(c.InvFreq(), T) }

// attention is causal grouped-query attention as HF's eager path computes
// it (cpu.Attention).
func attention(q, k, v kernels.Matrix, c *Config) kernels.Matrix {
	return cpu.Attention(q, k, v, c.Heads, c.KVHeads, c.HeadDim)
}
