package kernels

import "context"

// LlamaOps is the Llama decoder layer's operations besides its linears, in
// the float32 order of HF's eager path (model/ runs them; kernels/cpu is
// their reference).
type LlamaOps interface {
	// RMSNorm is LlamaRMSNorm: each row of x times rsqrt(mean(x²) + eps),
	// times w (len(w) == x.Cols).
	RMSNorm(ctx context.Context, x Matrix, w []float32, eps float32) (Matrix, error)
	// RoPE rotates each head of x [T, heads·d] as HF's rotate_half at
	// positions 0..T−1 with inverse frequencies inv (d/2 values, llama3
	// scaling already applied), returning the rotated copy.
	RoPE(ctx context.Context, x Matrix, heads, d int, inv []float32) (Matrix, error)
	// Attention is causal grouped-query attention over q [T, heads·d] and
	// k, v [T, kvHeads·d], softmax in float32.
	Attention(ctx context.Context, q, k, v Matrix, heads, kvHeads, d int) (Matrix, error)
	// SwiGLU returns silu(g)·u elementwise.
	SwiGLU(ctx context.Context, g, u Matrix) (Matrix, error)
}
