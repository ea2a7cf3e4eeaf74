package scheme

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// AppendJSONString writes what encoding/json writes, for names and for
// anything else.
func TestAppendJSONStringAsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	cases := []string{"", "a", "model.layers.0.mlp.experts.17.down_proj.weight_scale_2", "<|a|>", "x\"y", "tab\there", "é", "\xff", "\u2028", "12345678&", "1234567\\"}
	for range 5000 {
		n := r.IntN(40)
		b := make([]byte, n)
		for i := range b {
			if r.IntN(8) == 0 {
				b[i] = byte(r.IntN(256))
			} else {
				b[i] = byte('a' + r.IntN(26))
			}
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		want, _ := json.Marshal(s)
		if got := AppendJSONString([]byte("pre"), s); string(got) != "pre"+string(want) {
			t.Fatalf("%q: %s, want %s", s, got[3:], want)
		}
	}
}

// A tensor name, as an inventory quotes each.
func BenchmarkAppendJSONString(b *testing.B) {
	s := "model.layers.42.mlp.experts.117.gate_proj.weight_scale_2"
	buf := make([]byte, 0, 128)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		buf = AppendJSONString(buf[:0], s)
	}
}
