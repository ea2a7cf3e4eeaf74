package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/quantscope/quantscope/formats/numeric"
)

// The fast E2M1 path against the plain division, on values placed within a
// few ulps of every decision point and at random.
func TestE2M1FastMatchesDivision(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	points := []float32{0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 8}
	n := 0
	for range 20000 {
		d := float32(math.Ldexp(1+r.Float64(), r.IntN(60)-30))
		rec, ok := fastDiv(d)
		if !ok {
			t.Fatalf("fastDiv(%g) refused", d)
		}
		for _, p := range points {
			base := p * d
			for k := int32(-6); k <= 6; k++ {
				a := math.Float32frombits(uint32(int32(math.Float32bits(base)) + k))
				for _, w := range []float32{a, -a} {
					if got, want := e2m1CodeFast(w, d, rec), e2m1Code(w/d); got != want {
						t.Fatalf("w=%g d=%g: fast code %#x, division %#x", w, d, got, want)
					}
					n++
				}
			}
		}
		w := float32(r.NormFloat64()) * d * 3
		if e2m1CodeFast(w, d, rec) != e2m1Code(w/d) {
			t.Fatalf("w=%g d=%g", w, d)
		}
	}
	// a negative value whose quotient underflows to -0 keeps code 0
	if c := e2m1CodeFast(-0x1p-149, 0x1p100, 0x1p-100); c != 0 || e2m1Code(-0x1p-149/float32(0x1p100)) != 0 {
		t.Fatalf("-0 quotient: code %#x", c)
	}
	if c := e2m1CodeFast(-1e-30, 1, 1); c != 8 {
		t.Fatalf("negative underflow to zero code: %#x, want 8", c)
	}
}

// e4m3Scale against numeric's encoder over the whole clamped range, every
// 97th float32.
func TestE4M3ScaleMatchesEncoder(t *testing.T) {
	lo, hi := math.Float32bits(0x1p-9), math.Float32bits(448)
	for b := lo; b <= hi; b += 97 {
		s := math.Float32frombits(b)
		if got, want := e4m3Scale(s), numeric.Float32ToE4M3(s); got != want {
			t.Fatalf("s=%g: %#x, encoder %#x", s, got, want)
		}
	}
	for c := byte(1); c <= 0x7E; c++ { // every code's value and the midpoints
		v := numeric.E4M3ToFloat32(c)
		if e4m3Scale(v) != c {
			t.Fatalf("code %#x: %#x", c, e4m3Scale(v))
		}
		if c < 0x7E {
			mid := (v + numeric.E4M3ToFloat32(c+1)) / 2
			if got, want := e4m3Scale(mid), numeric.Float32ToE4M3(mid); got != want {
				t.Fatalf("tie %g: %#x, encoder %#x", mid, got, want)
			}
		}
	}
}
