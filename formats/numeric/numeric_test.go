package numeric

import (
	"math"
	"testing"

	"github.com/quantscope/quantscope/formats/safetensors"
)

// ref is the textbook value of a sign/exponent/mantissa code, written apart
// from the package's decoder so the two check each other.
func ref(c byte, eBits, mBits, bias int) float64 {
	s := 1.0
	if c&0x80 != 0 {
		s = -1
	}
	e := int(c>>mBits) & (1<<eBits - 1)
	m := float64(int(c) & (1<<mBits - 1))
	if e == 0 {
		return s * m / math.Pow(2, float64(mBits)) * math.Pow(2, float64(1-bias))
	}
	return s * (1 + m/math.Pow(2, float64(mBits))) * math.Pow(2, float64(e-bias))
}

type fp8 struct {
	name        string
	dec         func(byte) float32
	enc         func(float32) byte
	bulk        func([]float32, []byte)
	eBits, bias int
	isNaN       func(c byte) bool
	isInf       func(c byte) bool
	max         float32
	maxCode     byte
	nanCode     byte
	fnuz        bool
}

var fp8s = []fp8{
	{"e4m3fn", E4M3ToFloat32, Float32ToE4M3, DecodeE4M3, 4, 7,
		func(c byte) bool { return c&0x7F == 0x7F }, func(byte) bool { return false }, 448, 0x7E, 0x7F, false},
	{"e5m2", E5M2ToFloat32, Float32ToE5M2, DecodeE5M2, 5, 15,
		func(c byte) bool { return c&0x7C == 0x7C && c&3 != 0 }, func(c byte) bool { return c&0x7F == 0x7C }, 57344, 0x7B, 0x7F, false},
	{"e4m3fnuz", E4M3FNUZToFloat32, Float32ToE4M3FNUZ, DecodeE4M3FNUZ, 4, 8,
		func(c byte) bool { return c == 0x80 }, func(byte) bool { return false }, 240, 0x7F, 0x80, true},
	{"e5m2fnuz", E5M2FNUZToFloat32, Float32ToE5M2FNUZ, DecodeE5M2FNUZ, 5, 16,
		func(c byte) bool { return c == 0x80 }, func(byte) bool { return false }, 57344, 0x7F, 0x80, true},
}

func TestFP8EveryCode(t *testing.T) {
	for _, f := range fp8s {
		src := make([]byte, 256)
		for i := range src {
			src[i] = byte(i)
		}
		bulk := make([]float32, 256)
		f.bulk(bulk, src)
		for c := range 256 {
			got := f.dec(byte(c))
			if math.Float32bits(bulk[c]) != math.Float32bits(got) && !(got != got && bulk[c] != bulk[c]) {
				t.Errorf("%s 0x%02x: bulk %v scalar %v", f.name, c, bulk[c], got)
			}
			switch {
			case f.isNaN(byte(c)):
				if got == got {
					t.Errorf("%s 0x%02x: want NaN, got %v", f.name, c, got)
				}
				continue
			case f.isInf(byte(c)):
				if !math.IsInf(float64(got), 0) {
					t.Errorf("%s 0x%02x: want inf, got %v", f.name, c, got)
				}
				continue
			}
			want := ref(byte(c), f.eBits, 7-f.eBits, f.bias)
			if float64(got) != want {
				t.Errorf("%s 0x%02x: got %v want %v", f.name, c, got, want)
			}
			if math.Abs(float64(got)) > float64(f.max) {
				t.Errorf("%s 0x%02x: %v above max", f.name, c, got)
			}
			// Every finite code survives an encode; fnuz has no −0 to return to.
			back := f.enc(got)
			if back != byte(c) && !(f.fnuz && c == 0x80) {
				t.Errorf("%s: encode(decode(0x%02x) = %v) = 0x%02x", f.name, c, got, back)
			}
		}
		if f.dec(f.maxCode) != f.max {
			t.Errorf("%s: max code 0x%02x is %v, want %v", f.name, f.maxCode, f.dec(f.maxCode), f.max)
		}
	}
}

func TestFP8Encode(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	for _, f := range fp8s {
		if c := f.enc(nan); c != f.nanCode {
			t.Errorf("%s: NaN -> 0x%02x", f.name, c)
		}
		for _, x := range []float32{f.max * 1.01, f.max * 4, 1e30, inf} {
			if c := f.enc(x); c != f.maxCode {
				t.Errorf("%s: %v -> 0x%02x, want saturation to 0x%02x", f.name, x, c, f.maxCode)
			}
			if c := f.enc(-x); c != f.maxCode|0x80 {
				t.Errorf("%s: %v -> 0x%02x, want 0x%02x", f.name, -x, c, f.maxCode|0x80)
			}
		}
		neg0 := float32(math.Copysign(0, -1))
		if c := f.enc(neg0); f.fnuz && c != 0 || !f.fnuz && c != 0x80 {
			t.Errorf("%s: -0 -> 0x%02x", f.name, c)
		}
		// Midpoints between neighbouring positive codes round to the even code;
		// just off a midpoint rounds to the nearer one.
		for c := 0; c < int(f.maxCode); c++ {
			lo, hi := float64(f.dec(byte(c))), float64(f.dec(byte(c+1)))
			mid := float32((lo + hi) / 2)
			if float64(mid) != (lo+hi)/2 {
				t.Fatalf("%s: midpoint not exact in float32", f.name)
			}
			want := byte(c)
			if c%2 == 1 {
				want = byte(c + 1)
			}
			if got := f.enc(mid); got != want {
				t.Errorf("%s: tie %v between 0x%02x and 0x%02x -> 0x%02x", f.name, mid, c, c+1, got)
			}
			above := math.Nextafter32(mid, float32(math.Inf(1)))
			if got := f.enc(above); got != byte(c+1) {
				t.Errorf("%s: %v just above tie -> 0x%02x, want 0x%02x", f.name, above, got, c+1)
			}
			below := math.Nextafter32(mid, 0)
			if got := f.enc(below); got != byte(c) {
				t.Errorf("%s: %v just below tie -> 0x%02x, want 0x%02x", f.name, below, got, c)
			}
		}
		// Tiny values below half the smallest subnormal flush to zero.
		tiny := f.dec(1) / 2
		if c := f.enc(tiny); c != 0 {
			t.Errorf("%s: half the smallest subnormal (%v) -> 0x%02x, want 0 (tie to even)", f.name, tiny, c)
		}
	}
	// Known anchors.
	for _, a := range []struct {
		got  byte
		want byte
	}{
		{Float32ToE4M3(448), 0x7E}, {Float32ToE4M3(464), 0x7E}, {Float32ToE4M3(1), 0x38},
		{Float32ToE4M3(-2), 0xC0}, {Float32ToE4M3(1.0 / 512), 0x01}, {Float32ToE4M3(0.015625), 0x08},
		{Float32ToE5M2(1), 0x3C}, {Float32ToE5M2(57344), 0x7B}, {Float32ToE4M3FNUZ(1), 0x40},
		{Float32ToE4M3FNUZ(240), 0x7F}, {Float32ToE5M2FNUZ(1), 0x40},
	} {
		if a.got != a.want {
			t.Errorf("anchor: got 0x%02x want 0x%02x", a.got, a.want)
		}
	}
	if E4M3ToFloat32(0x7E) != 448 || E4M3ToFloat32(0x01) != 1.0/512 || E5M2ToFloat32(0x7C) != float32(math.Inf(1)) {
		t.Error("decode anchors")
	}
}

func TestE8M0(t *testing.T) {
	src := make([]byte, 256)
	for i := range src {
		src[i] = byte(i)
	}
	bulk := make([]float32, 256)
	DecodeE8M0(bulk, src)
	for c := range 255 {
		want := math.Pow(2, float64(c-127))
		if float64(E8M0ToFloat32(byte(c))) != want || float64(bulk[c]) != want {
			t.Errorf("e8m0 0x%02x: %v, want %v", c, E8M0ToFloat32(byte(c)), want)
		}
		if Float32ToE8M0(float32(want)) != byte(c) {
			t.Errorf("e8m0 encode 2^%d -> 0x%02x", c-127, Float32ToE8M0(float32(want)))
		}
	}
	if v := E8M0ToFloat32(0xFF); v == v {
		t.Error("0xFF must be NaN")
	}
	for _, a := range []struct {
		x    float32
		want byte
	}{{1.49, 127}, {1.5, 128}, {3, 129}, {0.75, 127}, {0.74, 126}, {0, 0}, {-1, 0xFF}, {float32(math.NaN()), 0xFF}, {3e38, 254}} {
		if got := Float32ToE8M0(a.x); got != a.want {
			t.Errorf("e8m0 encode %v -> %d, want %d", a.x, got, a.want)
		}
	}
}

func TestE2M1(t *testing.T) {
	mags := []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	for c := range 16 {
		want := mags[c&7]
		if c&8 != 0 {
			want = -want
		}
		if got := E2M1ToFloat32(byte(c)); got != want || math.Signbit(float64(got)) != (c&8 != 0) {
			t.Errorf("e2m1 %d: %v want %v", c, got, want)
		}
		if c != 8 && Float32ToE2M1(want) != byte(c) {
			t.Errorf("e2m1 encode %v -> %d want %d", want, Float32ToE2M1(want), c)
		}
	}
	// Every byte of the pair table against the scalar decoder, low nibble first.
	src := make([]byte, 256)
	for i := range src {
		src[i] = byte(i)
	}
	dst := make([]float32, 512)
	DecodeE2M1(dst, src)
	for b := range 256 {
		if dst[2*b] != E2M1ToFloat32(byte(b)&0xF) || dst[2*b+1] != E2M1ToFloat32(byte(b)>>4) {
			t.Errorf("pair 0x%02x: %v %v", b, dst[2*b], dst[2*b+1])
		}
	}
	for _, a := range []struct {
		x    float32
		want byte
	}{
		{0.25, 0}, {0.2500001, 1}, {0.75, 2}, {0.7499, 1}, {1.25, 2}, {1.2501, 3}, {1.75, 4}, {2.5, 4},
		{2.51, 5}, {3.5, 6}, {3.49, 5}, {5, 6}, {5.01, 7}, {100, 7}, {float32(math.Inf(1)), 7},
		{-0.75, 10}, {-6, 15}, {-1e9, 15}, {float32(math.Copysign(0, -1)), 0}, {-0.1, 8}, {-0.25, 8}, {float32(math.NaN()), 0},
	} {
		if got := Float32ToE2M1(a.x); got != a.want {
			t.Errorf("e2m1 encode %v -> %d want %d", a.x, got, a.want)
		}
	}
	codes := []byte{1, 2, 3, 4, 5}
	packed := make([]byte, 3)
	PackE2M1(packed, codes)
	if packed[0] != 0x21 || packed[1] != 0x43 || packed[2] != 0x05 {
		t.Errorf("pack %x", packed)
	}
	out := make([]float32, 6)
	DecodeE2M1Blocks(out, packed, []float32{2, 10, 100}, 2)
	if out[0] != 1 || out[1] != 2 || out[2] != 15 || out[3] != 20 || out[4] != 300 || out[5] != 0 {
		t.Errorf("blocks %v", out)
	}
}

func TestHalves(t *testing.T) {
	src := make([]byte, 2*65536)
	for h := range 65536 {
		src[2*h], src[2*h+1] = byte(h), byte(h>>8)
	}
	f16 := make([]float32, 65536)
	bf := make([]float32, 65536)
	DecodeF16(f16, src)
	DecodeBF16(bf, src)
	for h := range 65536 {
		g := F16ToFloat32(uint16(h))
		if math.Float32bits(g) != math.Float32bits(f16[h]) {
			t.Fatalf("f16 0x%04x: %v %v", h, g, f16[h])
		}
		if g == g && Float32ToF16(g) != uint16(h) {
			t.Fatalf("f16 round trip 0x%04x", h)
		}
		b := BF16ToFloat32(uint16(h))
		if math.Float32bits(b) != math.Float32bits(bf[h]) || b == b && Float32ToBF16(b) != uint16(h) {
			t.Fatalf("bf16 0x%04x", h)
		}
	}
	if F16ToFloat32(0x3C00) != 1 || F16ToFloat32(0x7BFF) != 65504 || F16ToFloat32(0x0001) != float32(math.Ldexp(1, -24)) {
		t.Error("f16 anchors")
	}
	// bf16 ties to even: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7.
	if Float32ToBF16(1+1.0/256) != 0x3F80 || Float32ToBF16(1+3.0/256) != 0x3F82 {
		t.Error("bf16 ties")
	}
}

func TestDecodeDTypes(t *testing.T) {
	for _, c := range []struct {
		dt   string
		src  []byte
		want []float32
	}{
		{"I8", []byte{0xFF, 2}, []float32{-1, 2}},
		{"U8", []byte{0xFF, 2}, []float32{255, 2}},
		{"BOOL", []byte{0, 7}, []float32{0, 1}},
		{"I16", []byte{0xFE, 0xFF}, []float32{-2}},
		{"U16", []byte{0xFE, 0xFF}, []float32{65534}},
		{"I32", []byte{0xFD, 0xFF, 0xFF, 0xFF}, []float32{-3}},
		{"U32", []byte{3, 0, 0, 0}, []float32{3}},
		{"I64", []byte{0xFC, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, []float32{-4}},
		{"U64", []byte{4, 0, 0, 0, 0, 0, 0, 0}, []float32{4}},
		{"F32", []byte{0, 0, 0x80, 0x3F}, []float32{1}},
		{"F64", []byte{0, 0, 0, 0, 0, 0, 0xF0, 0x3F}, []float32{1}},
		{"F4", []byte{0x72}, []float32{1, 6}},
		{"F8_E8M0", []byte{127}, []float32{1}},
	} {
		dt, _ := safetensors.ParseDType(c.dt)
		got, err := Decode(dt, c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.dt, err)
		}
		if len(got) != len(c.want) {
			t.Fatalf("%s: %v", c.dt, got)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: %v want %v", c.dt, got, c.want)
			}
		}
	}
	dt, _ := safetensors.ParseDType("C64")
	if _, err := Decode(dt, make([]byte, 8)); err == nil {
		t.Error("C64 has no float32 decoder and must say so")
	}
}

// The unrolled bulk loops agree with the scalar decoders at every length,
// tails included.
func TestBulkTails(t *testing.T) {
	src := benchSrc(64)
	for n := 0; n <= 33; n++ {
		in := src[:n]
		got := make([]float32, n)
		DecodeE4M3(got, in)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(E4M3ToFloat32(in[i])) {
				t.Fatalf("e4m3 n=%d i=%d", n, i)
			}
		}
		pairs := make([]float32, 2*n)
		DecodeE2M1(pairs, in)
		scales := make([]float32, (2*n+15)/16)
		for i := range scales {
			scales[i] = float32(i + 2)
		}
		blocks := make([]float32, 2*n)
		DecodeE2M1Blocks(blocks, in, scales, 16)
		for i := range pairs {
			want := E2M1ToFloat32(in[i/2] >> (4 * (i % 2)))
			if pairs[i] != want || blocks[i] != want*scales[i/16] {
				t.Fatalf("e2m1 n=%d i=%d: %v %v want %v", n, i, pairs[i], blocks[i], want)
			}
		}
		if n%2 == 0 {
			bf := make([]float32, n/2)
			DecodeBF16(bf, in)
			for i := range bf {
				if math.Float32bits(bf[i]) != math.Float32bits(BF16ToFloat32(uint16(in[2*i])|uint16(in[2*i+1])<<8)) {
					t.Fatalf("bf16 n=%d i=%d", n, i)
				}
			}
		}
	}
}
