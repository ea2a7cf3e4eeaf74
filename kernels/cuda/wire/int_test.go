package wire

import (
	"encoding/binary"
	"strings"
	"testing"
)

// Check refuses integer requests whose parts would make a kernel read out
// of bounds: sizes, bit widths, and a column group outside the scales.
func TestCheckInt(t *testing.T) {
	parts := func(words, groups, rows, cols int64, g int32) [][]byte {
		gi := make([]byte, 4*cols)
		for i := range cols {
			binary.LittleEndian.PutUint32(gi[4*i:], uint32(min(int32(i)/32, int32(groups)-1)))
		}
		binary.LittleEndian.PutUint32(gi[4*(cols-1):], uint32(g))
		return [][]byte{make([]byte, words), make([]byte, 4*groups*rows), make([]byte, 4*groups*rows), gi}
	}
	ok := Request{Op: OpDequantInt, Rows: 16, Cols: 64, IntFields: IntFields{Layout: LayoutGPTQ, Bits: 4, Groups: 2}}
	if err := Check(ok, parts(16*64/2, 2, 16, 64, 1)); err != nil {
		t.Fatal(err)
	}
	st := ok
	st.Op, st.Source = OpStats, SourceInt
	if err := Check(st, parts(16*64/2, 2, 16, 64, 1)); err != nil {
		t.Fatal(err)
	}
	ct := Request{Op: OpDequantInt, Rows: 3, Cols: 50, IntFields: IntFields{Layout: LayoutCTPerWord, Bits: 3, Groups: 1}}
	if err := Check(ct, parts(3*5*4, 1, 3, 50, 0)); err != nil { // 10 values a word: 5 words a row
		t.Fatal(err)
	}
	for _, c := range []struct {
		req   Request
		parts [][]byte
		want  string
	}{
		{ok, parts(16*64/2, 2, 16, 64, 2), "group 2 is outside 0..1"},
		{ok, parts(16*64/2, 2, 16, 64, -1), "group -1"},
		{ok, parts(16*64/2-4, 2, 16, 64, 0), "part 0 holds"},
		{Request{Op: OpDequantInt, Rows: 16, Cols: 64, IntFields: IntFields{Layout: LayoutGPTQ, Bits: 5, Groups: 2}}, parts(640, 2, 16, 64, 0), "GPTQ bits 5"},
		{Request{Op: OpDequantInt, Rows: 12, Cols: 64, IntFields: IntFields{Layout: LayoutAWQ, Bits: 4, Groups: 2}}, parts(384, 2, 12, 64, 0), "multiple of 8"},
		{Request{Op: OpDequantInt, Rows: 16, Cols: 64, IntFields: IntFields{Layout: 7, Bits: 4, Groups: 2}}, parts(512, 2, 16, 64, 0), "unknown integer layout"},
		{Request{Op: OpStats, Rows: 16, Cols: 64, IntFields: IntFields{Source: "bf16"}}, nil, "unknown source"},
		{Request{Op: OpStats, IntFields: IntFields{Source: SourceNVFP4}}, [][]byte{make([]byte, 8), make([]byte, 2)}, "part 1 holds 2 bytes, want 1"},
	} {
		err := Check(c.req, c.parts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one saying %q", c.req, err, c.want)
		}
	}
}
