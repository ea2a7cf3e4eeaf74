package wire

import (
	"strings"
	"testing"
)

func TestCheckQuant2(t *testing.T) {
	w := func(n int) []byte { return make([]byte, n) }
	for _, c := range []struct {
		req   Request
		parts [][]byte
		err   string // "" accepted
	}{
		{Request{Op: OpQuantFP8, Rows: 3, Cols: 5, R: 3, C: 5}, [][]byte{w(60)}, ""},
		{Request{Op: OpQuantFP8, Rows: 3, Cols: 5, R: 1, C: 5, E5M2: true, Inv: true}, [][]byte{w(60)}, ""},
		{Request{Op: OpQuantFP8, Rows: 3, Cols: 5, R: 0, C: 5}, [][]byte{w(60)}, "dimension 0"},
		{Request{Op: OpQuantFP8, Rows: 3, Cols: 5, R: 1, C: 5}, [][]byte{w(59)}, "holds 59 bytes, want 60"},
		{Request{Op: OpQuantNVFP4GPTQ, Rows: 2, Cols: 32, Recipe: "four_six", Global: 1}, [][]byte{w(256)}, ""},
		{Request{Op: OpQuantNVFP4GPTQ, Rows: 2, Cols: 32, Recipe: "least_squares", Global: 0.5}, [][]byte{w(256)}, ""},
		{Request{Op: OpQuantNVFP4GPTQ, Rows: 2, Cols: 32, Recipe: "mse", Global: 1}, [][]byte{w(256)}, "not four_six"},
		{Request{Op: OpQuantNVFP4GPTQ, Rows: 2, Cols: 24, Recipe: "four_six", Global: 1}, [][]byte{w(192)}, "16-value blocks"},
		{Request{Op: OpQuantNVFP4GPTQ, Rows: 2, Cols: 32, Recipe: "four_six", Global: 0}, [][]byte{w(256)}, "not positive"},
		{Request{Op: OpQuantNVFP4LH, Rows: 2, Cols: 32, T: 3, Global: 1}, [][]byte{w(256), w(384)}, ""},
		{Request{Op: OpQuantNVFP4LH, Rows: 2, Cols: 32, T: 3, Global: 1}, [][]byte{w(256)}, "1 payload parts, want 2"},
		{Request{Op: OpQuantNVFP4LH, Rows: 2, Cols: 32, T: 0, Global: 1}, [][]byte{w(256), w(0)}, "dimension 0"},
		{Request{Op: OpQuantNVFP4LH, Rows: 1, Cols: 2 * QuantLHMaxCols, T: 1, Global: 1}, nil, "at most"},
	} {
		err := Check(c.req, c.parts)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%+v: %v, want %q", c.req, err, c.err)
		}
	}
}
