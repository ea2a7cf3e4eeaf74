package wire

import (
	"strings"
	"testing"
)

// TestCheckForward: the forward operations' sizes are checked before any
// kernel runs; well-formed requests pass.
func TestCheckForward(t *testing.T) {
	b := func(n ...int) [][]byte {
		p := make([][]byte, len(n))
		for i, x := range n {
			p[i] = make([]byte, x)
		}
		return p
	}
	good := []struct {
		req   Request
		parts [][]byte
	}{
		{Request{Op: OpW4ANVFP4, T: 2, K: 128, N: 32, Global: 0.5}, b(128, 16, 2048, 4*32)},
		{Request{Op: OpRMSNorm, Rows: 3, Cols: 8, Fwd: &Fwd{Eps: 1e-5}}, b(96, 32)},
		{Request{Op: OpW4AFP8TC, T: 2, K: 128, N: 3}, b(256, 8, 192, 12)},
		{Request{Op: OpW4ANVFP4TC, T: 2, K: 128, N: 32, Global: 0.5}, b(128, 16, 2048, 4*32)},
		{Request{Op: OpRoPE, Rows: 3, Fwd: &Fwd{Heads: 2, HeadDim: 8}}, b(4*3*16, 16)},
		{Request{Op: OpAttention, Rows: 3, Fwd: &Fwd{Heads: 4, KVHeads: 2, HeadDim: 8}}, b(4*3*32, 4*3*16, 4*3*16)},
		{Request{Op: OpSwiGLU}, b(40, 40)},
		{Request{Op: OpChannelStats, Rows: 2, Cols: 5}, b(40)},
		{Request{Op: OpBlockHessians, Rows: 2, Cols: 16}, b(128)},
		{Request{Op: OpAbsHist, Fwd: &Fwd{Max: 3, Bins: 2048}}, b(40)},
	}
	for _, c := range good {
		if err := Check(c.req, c.parts); err != nil {
			t.Errorf("%s: %v", c.req.Op, err)
		}
	}
	bad := []struct {
		req   Request
		parts [][]byte
		want  string
	}{
		{Request{Op: OpW4ANVFP4, T: 2, K: 128, N: 32, Global: 0.5}, b(128, 16, 2048, 4*31), "part 3"},
		{Request{Op: OpW4ANVFP4, T: 2, K: 100, N: 32, Global: 0.5}, b(100, 12, 1600, 0), "multiple of 128"},
		{Request{Op: OpW4ANVFP4, T: 2, K: 128, N: 32}, b(128, 16, 2048, 4*32), "global scale"},
		{Request{Op: OpRMSNorm, Rows: 3, Cols: 8}, b(96, 28), "part 1"},
		{Request{Op: OpW4AFP8TC, T: 2, K: 128, N: 3}, b(256, 8, 192, 8), "part 3"},
		{Request{Op: OpRoPE, Rows: 3, Fwd: &Fwd{Heads: 2, HeadDim: 7}}, b(4*3*14, 12), "odd"},
		{Request{Op: OpRoPE, Rows: 3}, b(4, 4), "out of range"},
		{Request{Op: OpAttention, Rows: 3, Fwd: &Fwd{Heads: 3, KVHeads: 2, HeadDim: 8}}, b(4*3*24, 4*3*16, 4*3*16), "multiple"},
		{Request{Op: OpAttention, Rows: AttnMaxT + 1, Fwd: &Fwd{Heads: 1, KVHeads: 1, HeadDim: 8}}, b(0, 0, 0), "tokens exceed"},
		{Request{Op: OpAttention, Rows: 3, Fwd: &Fwd{Heads: 4, KVHeads: 2, HeadDim: 8}}, b(4*3*32, 4*3*16, 4*3*15), "part 2"},
		{Request{Op: OpSwiGLU}, b(40, 36), "part 1"},
		{Request{Op: OpSwiGLU}, b(0, 0), "float32"},
		{Request{Op: OpChannelStats, Rows: 2, Cols: 5}, b(36), "part 0"},
		{Request{Op: OpBlockHessians, Rows: 2, Cols: 8}, b(64), "16-wide"},
		{Request{Op: OpAbsHist, Fwd: &Fwd{Max: 3, Bins: HistMaxBin + 1}}, b(40), "bins"},
		{Request{Op: OpAbsHist, Fwd: &Fwd{Max: 0, Bins: 16}}, b(40), "positive"},
		{Request{Op: OpChannelStats, Rows: 1 << 20, Cols: 1 << 10}, b(0), "staging"},
	}
	for _, c := range bad {
		err := Check(c.req, c.parts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %+v: error %v, want one saying %q", c.req.Op, c.req, err, c.want)
		}
	}
}
