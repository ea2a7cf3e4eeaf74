package scheme

import (
	"math"
	"testing"

	"github.com/quantscope/quantscope/synth"
)

// The block scales of an MXFP4 sample are the E8M0 values 2^(byte−127) of
// the stored U8 exponents, not the bytes read as integers.
func TestSampleMXFP4ScalesAreE8M0(t *testing.T) {
	w := weights(21, 16, 256)
	mem := newMem(t, synth.MXFP4("m", w))
	m := Group(mem.infos(), &Scheme{Method: "mxfp4", Family: FamilyMXFP4}, nil)[0]
	s, err := SampleRows(m, mem, 4, 7, 0, 256)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := mem.ReadTensor("m_scales", 4*8, 3*8)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Scales) != len(raw) {
		t.Fatalf("%d scales for %d stored bytes", len(s.Scales), len(raw))
	}
	for i, b := range raw {
		want := float32(math.Ldexp(1, int(b)-127)) // E8M0: a bare exponent with bias 127
		if b == 0xff {
			want = float32(math.NaN())
		}
		if s.Scales[i] != want && !(b == 0xff && s.Scales[i] != s.Scales[i]) {
			t.Fatalf("scale %d: byte %d decodes to %g, want %g", i, b, s.Scales[i], want)
		}
	}
	// The weights are around 0.02, so the block scales are small powers of two.
	for _, v := range s.Scales {
		if v >= 1 {
			t.Fatalf("scale %g is not a plausible block scale of weights near 0.02", v)
		}
	}
}
