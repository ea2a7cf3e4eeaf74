package packing

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

func randCodes(r *rand.Rand, n, bits int) []int8 {
	c := make([]int8, n)
	for i := range c {
		c[i] = int8(r.IntN(1<<bits)) - int8(1<<(bits-1))
	}
	return c
}

func TestCTRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for bits := 1; bits <= 8; bits++ {
		for _, l := range []CTLayout{CTBitstream, CTPerWord} {
			for _, cols := range []int{1, 3, 31, 32, 33, 100} {
				rows := 3
				codes := randCodes(r, rows*cols, bits)
				packed, err := PackCT(codes, rows, cols, bits, l)
				if err != nil {
					t.Fatal(err)
				}
				if len(packed) != 4*rows*CTWordsPerRow(cols, bits, l) {
					t.Fatalf("bits %d %v cols %d: %d bytes", bits, l, cols, len(packed))
				}
				got := make([]int8, rows*cols)
				if err := UnpackCT(got, packed, rows, cols, bits, l); err != nil {
					t.Fatal(err)
				}
				for i := range got {
					if got[i] != codes[i] {
						t.Fatalf("bits %d %v cols %d: element %d: %d want %d", bits, l, cols, i, got[i], codes[i])
					}
				}
				zp, err := PackCTDim0(codes, rows, cols, bits, l)
				if err != nil {
					t.Fatal(err)
				}
				if len(zp) != 4*cols*CTWordsPerRow(rows, bits, l) {
					t.Fatalf("dim0 size %d", len(zp))
				}
				if err := UnpackCTDim0(got, zp, rows, cols, bits, l); err != nil {
					t.Fatal(err)
				}
				for i := range got {
					if got[i] != codes[i] {
						t.Fatalf("dim0 bits %d %v: element %d: %d want %d", bits, l, i, got[i], codes[i])
					}
				}
			}
		}
	}
}

// The two layouts write the same bytes exactly when b divides 32.
func TestCTLayoutsAgreeOnlyForPowersOfTwo(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 9))
	for bits := 1; bits <= 8; bits++ {
		codes := randCodes(r, 4*64, bits)
		a, _ := PackCT(codes, 4, 64, bits, CTBitstream)
		b, _ := PackCT(codes, 4, 64, bits, CTPerWord)
		same := bytes.Equal(a, b)
		if same != (32%bits == 0) {
			t.Errorf("bits %d: layouts equal = %v", bits, same)
		}
	}
}

// CT-002 and CT-003 by hand: 3-bit codes, element 10 spans bits 30..32.
func TestCTBitstreamCrossesWords(t *testing.T) {
	codes := make([]int8, 11)
	codes[10] = 3 // stored 3+4 = 0b111: two bits in word 0, one in word 1
	packed, err := PackCT(codes, 1, 11, 3, CTBitstream)
	if err != nil {
		t.Fatal(err)
	}
	w0 := binary.LittleEndian.Uint32(packed)
	w1 := binary.LittleEndian.Uint32(packed[4:])
	// the other ten fields store 0+4 = 0b100
	var want0 uint32
	for i := range 10 {
		want0 |= 4 << (3 * i)
	}
	want0 |= 3 << 30
	if w0 != want0 || w1 != 1 {
		t.Fatalf("words %08x %08x, want %08x %08x", w0, w1, want0, 1)
	}
	if _, err := PackCT([]int8{4}, 1, 1, 3, CTBitstream); err == nil {
		t.Error("code 4 does not fit signed 3 bits (CT-002)")
	}
}

// The format card's example: two rows of one word each, 8 int4 codes a word.
func TestCTFormatCardExample(t *testing.T) {
	packed := []byte{0x98, 0xba, 0xdc, 0xfe, 0x10, 0x32, 0x54, 0x76}
	got := make([]int8, 16)
	if err := UnpackCT(got, packed, 2, 8, 4, CTBitstream); err != nil {
		t.Fatal(err)
	}
	want := []int8{0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("codes %v, want %v", got, want)
		}
	}
}

func TestCTRejects(t *testing.T) {
	var le *LayoutError
	if err := UnpackCT(make([]int8, 8), make([]byte, 4), 1, 8, 9, CTBitstream); !errors.As(err, &le) || le.Rule != "CT-001" {
		t.Errorf("9 bits: %v", err)
	}
	if err := UnpackCT(make([]int8, 8), make([]byte, 4), 1, 8, 0, CTBitstream); !errors.As(err, &le) || le.Rule != "CT-001" {
		t.Errorf("0 bits: %v", err)
	}
	if err := UnpackCT(make([]int8, 9), make([]byte, 4), 1, 9, 4, CTBitstream); !errors.As(err, &le) || le.Rule != "packed-size" {
		t.Errorf("short: %v", err)
	}
	if err := UnpackCTDim0(make([]int8, 9), make([]byte, 3), 9, 1, 4, CTBitstream); err == nil {
		t.Error("short zero points accepted")
	}
}

func TestCTLayoutForVersion(t *testing.T) {
	for v, want := range map[string]CTLayout{"": CTBitstream, "0.17.1": CTPerWord, "0.9.4": CTPerWord,
		"0.18.0": CTBitstream, "0.18.1.dev3": CTBitstream, "1.0": CTBitstream, "garbage": CTBitstream, "0.17": CTPerWord} {
		if got := CTLayoutForVersion(v); got != want {
			t.Errorf("%q: %v", v, got)
		}
	}
}

func TestGPTQ(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, bits := range []int{2, 3, 4, 8} {
		in, out := 64, 5
		codes := make([]uint8, in*out)
		for i := range codes {
			codes[i] = uint8(r.IntN(1 << bits))
		}
		q, err := PackGPTQWeight(codes, in, out, bits)
		if err != nil {
			t.Fatal(err)
		}
		if len(q) != 4*in*bits/32*out {
			t.Fatalf("qweight %d bytes", len(q))
		}
		got := make([]uint8, in*out)
		if err := UnpackGPTQWeight(got, q, in, out, bits); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, codes) {
			t.Fatalf("bits %d round trip", bits)
		}
	}
	// 4-bit: qweight[0][j] holds inputs 0..7 of column j, input 0 lowest.
	codes := make([]uint8, 8*2)
	for i := range 8 {
		codes[i*2+1] = uint8(i)
	}
	q, _ := PackGPTQWeight(codes, 8, 2, 4)
	if w := binary.LittleEndian.Uint32(q[4:]); w != 0x76543210 {
		t.Fatalf("column 1 word %08x", w)
	}
	// Symmetric v1 zero points (stored z−1 = 7) read 0x77777777.
	zeros := bytes.Repeat([]byte{7}, 8)
	z, _ := PackRowBits(zeros, 1, 8, 4)
	if w := binary.LittleEndian.Uint32(z); w != 0x77777777 {
		t.Fatalf("qzeros word %08x", w)
	}
	back := make([]uint8, 8)
	if err := UnpackRowBits(back, z, 1, 8, 4); err != nil || !bytes.Equal(back, zeros) {
		t.Fatal("qzeros round trip")
	}
	if _, err := GPTQWeightRows(10, 3); err == nil {
		t.Error("10 inputs at 3 bits do not fill words")
	}
	if err := UnpackGPTQWeight(make([]uint8, 64), make([]byte, 7), 32, 2, 4); err == nil {
		t.Error("short qweight accepted")
	}
}

func TestAWQ(t *testing.T) {
	codes := []uint8{0, 1, 2, 3, 4, 5, 6, 7}
	p, err := PackAWQ(codes, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	// nibble k holds column [0,2,4,6,1,3,5,7][k]
	if w := binary.LittleEndian.Uint32(p); w != 0x75316420 {
		t.Fatalf("AWQ word %08x, want 75316420", w)
	}
	r := rand.New(rand.NewPCG(5, 5))
	codes = make([]uint8, 3*32)
	for i := range codes {
		codes[i] = uint8(r.IntN(16))
	}
	p, _ = PackAWQ(codes, 3, 32)
	got := make([]uint8, len(codes))
	if err := UnpackAWQ(got, p, 3, 32); err != nil || !bytes.Equal(got, codes) {
		t.Fatalf("AWQ round trip: %v", err)
	}
	if err := UnpackAWQ(got, p, 3, 30); err == nil {
		t.Error("30 columns accepted")
	}
}

func TestMXFP4(t *testing.T) {
	blocks := make([]byte, 32)
	blocks[0] = 0x21     // elements 0, 1: 0.5, 1
	blocks[16+15] = 0xF7 // elements 62, 63 of block 1: 6, -6
	scales := []byte{127 + 2, 127 - 1}
	dst := make([]float32, 64)
	if err := DecodeMXFP4(dst, blocks, scales); err != nil {
		t.Fatal(err)
	}
	if dst[0] != 2 || dst[1] != 4 || dst[2] != 0 || dst[62] != 3 || dst[63] != -3 {
		t.Fatalf("%v", dst)
	}
	if err := DecodeMXFP4(dst, blocks[:31], scales); err == nil {
		t.Error("short blocks accepted")
	}
	b := []byte{0x21}
	SwapNibbles(b)
	if b[0] != 0x12 {
		t.Error("swap")
	}
	_ = math.Pi
}

// FuzzUnpack runs every unpacker on arbitrary bytes and dimensions: each must
// either refuse with an error or fill the destination, never panic.
func FuzzUnpack(f *testing.F) {
	f.Add([]byte{0x98, 0xba, 0xdc, 0xfe, 0x10, 0x32, 0x54, 0x76}, uint8(2), uint8(8), uint8(4))
	f.Add(make([]byte, 12), uint8(1), uint8(32), uint8(3))
	f.Add(make([]byte, 64), uint8(8), uint8(8), uint8(8))
	f.Fuzz(func(t *testing.T, data []byte, rows, cols, bits uint8) {
		r, c, b := int(rows)%64, int(cols)%128, int(bits)%10
		codes := make([]int8, r*c)
		for _, l := range []CTLayout{CTBitstream, CTPerWord} {
			if UnpackCT(codes, data, r, c, b, l) == nil {
				again, err := PackCT(codes, r, c, b, l)
				if err != nil {
					t.Fatal(err)
				}
				// Unused high bits may differ; what they decode to may not.
				back := make([]int8, r*c)
				if err := UnpackCT(back, again, r, c, b, l); err != nil || !bytes.Equal(int8Bytes(back), int8Bytes(codes)) {
					t.Fatal("repack changed codes")
				}
			}
			_ = UnpackCTDim0(codes, data, r, c, b, l)
		}
		u := make([]uint8, r*c)
		_ = UnpackGPTQWeight(u, data, r, c, b)
		_ = UnpackRowBits(u, data, r, c, b)
		_ = UnpackPlanarRowBits(u, data, r, c, b)
		if b > 0 && r > 0 {
			i0, i1 := int(bits)%(r+1), r
			w := make([]uint8, (i1-i0)*c)
			_ = UnpackGPTQPlanarColumns(w, data, c, b, i0, i1, 0, c)
		}
		_ = UnpackAWQ(u, data, r, c)
		_ = UnpackModelOptInt4(codes, data, r, c)
		dst := make([]float32, 2*len(data))
		_ = DecodeMXFP4(dst, data, data[:len(data)/16])
	})
}

func int8Bytes(x []int8) []byte {
	b := make([]byte, len(x))
	for i, v := range x {
		b[i] = byte(v)
	}
	return b
}

// A window of inputs unpacked from just its rows equals the same window of
// the whole unpack, for every width (3-bit fields cross words).
func TestGPTQColumns(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	for _, bits := range []int{2, 3, 4, 8} {
		in, out := 96, 6
		codes := make([]uint8, in*out)
		for i := range codes {
			codes[i] = uint8(r.IntN(1 << bits))
		}
		q, _ := PackGPTQWeight(codes, in, out, bits)
		for _, w := range [][2]int{{0, 96}, {5, 17}, {31, 33}, {40, 41}} {
			r0, r1 := GPTQWordRows(w[0], w[1], bits)
			got := make([]uint8, (w[1]-w[0])*4)
			if err := UnpackGPTQColumns(got, q[4*r0*out:4*r1*out], out, bits, w[0], w[1], 1, 5); err != nil {
				t.Fatal(err)
			}
			for i := w[0]; i < w[1]; i++ {
				for o := 1; o < 5; o++ {
					if got[(i-w[0])*4+(o-1)] != codes[i*out+o] {
						t.Fatalf("bits %d window %v: [%d,%d]", bits, w, i, o)
					}
				}
			}
		}
	}
	if err := UnpackGPTQColumns(make([]uint8, 8), make([]byte, 3), 2, 4, 0, 8, 0, 1); err == nil {
		t.Error("short rows accepted")
	}
}

// Dimensions from a hostile header whose products pass 2^64 are refused,
// not wrapped into a size that matches a short buffer.
func TestHugeDimensions(t *testing.T) {
	for _, c := range []struct {
		cols, bits int
		l          CTLayout
		want       int
	}{
		{1<<62 + 1, 4, CTBitstream, 1<<59 + 1},
		{math.MaxInt, 8, CTBitstream, 1 << 61},
		{math.MaxInt, 3, CTBitstream, 3 << 58},
		{math.MaxInt, 3, CTPerWord, math.MaxInt/10 + 1},
		{100, 3, CTBitstream, 10},
		{100, 3, CTPerWord, 10},
	} {
		if got := CTWordsPerRow(c.cols, c.bits, c.l); got != c.want {
			t.Errorf("CTWordsPerRow(%d, %d, %v) = %d, want %d", c.cols, c.bits, c.l, got, c.want)
		}
	}
	// Buffers the size a wrapped product asks for: 4 × (2^62+1) codes
	// wrapped to 4, 2^40 rows of 2^38 words to 0 bytes.
	var le *LayoutError
	for _, c := range []struct {
		rows, cols, bits int
		packed           []byte
	}{
		{4, 1<<62 + 1, 4, make([]byte, 16)},
		{1 << 40, 1 << 40, 8, nil},
		{-1, 8, 4, nil},
	} {
		for _, l := range []CTLayout{CTBitstream, CTPerWord} {
			if err := UnpackCT(make([]int8, 16), c.packed, c.rows, c.cols, c.bits, l); !errors.As(err, &le) || le.Rule != "packed-size" {
				t.Errorf("UnpackCT [%d, %d] %v: %v", c.rows, c.cols, l, err)
			}
			if err := UnpackCTDim0(make([]int8, 16), c.packed, c.cols, c.rows, c.bits, l); err == nil {
				t.Errorf("UnpackCTDim0 [%d, %d] %v accepted", c.cols, c.rows, l)
			}
			if _, err := PackCT(make([]int8, 4), c.rows, c.cols, c.bits, l); err == nil {
				t.Errorf("PackCT [%d, %d] %v accepted", c.rows, c.cols, l)
			}
		}
		if err := UnpackRowBits(make([]uint8, 16), c.packed, c.rows, c.cols, c.bits); err == nil {
			t.Errorf("UnpackRowBits [%d, %d] accepted", c.rows, c.cols)
		}
	}
}

// A window with no outputs unpacks nothing: no buffer sized by its 2^47
// inputs (a header of no bytes once asked for 64 TiB here).
func TestGPTQColumnsEmptyWindow(t *testing.T) {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	err := UnpackGPTQColumns(nil, nil, 0, 4, 0, 1<<47, 0, 0)
	runtime.ReadMemStats(&b)
	if err != nil {
		t.Fatal(err)
	}
	if n := b.TotalAlloc - a.TotalAlloc; n > 1<<16 {
		t.Fatalf("an empty window allocated %d bytes", n)
	}
}

// ModelOpt's pack_int4_in_uint8, transcribed plainly: the int8 codes
// transposed to [in, out], reshaped to [in, out/2, 2], byte = (pair[0] &
// 0x0F) | (pair[1] & 0x0F) << 4, transposed back to [out/2, in].
func modeloptPack(codes []int8, rows, cols int) []byte {
	out := make([]byte, rows/2*cols)
	for c := range cols {
		for k := range rows / 2 {
			v0 := byte(codes[(2*k)*cols+c]) & 0x0F
			v1 := byte(codes[(2*k+1)*cols+c]) & 0x0F
			out[k*cols+c] = v0 | v1<<4
		}
	}
	return out
}

func TestUnpackModelOptInt4(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, shape := range [][2]int{{2, 1}, {4, 3}, {16, 40}, {0, 5}, {6, 0}} {
		rows, cols := shape[0], shape[1]
		codes := make([]int8, rows*cols)
		for i := range codes {
			codes[i] = int8(r.IntN(16) - 8)
		}
		got := make([]int8, rows*cols)
		if err := UnpackModelOptInt4(got, modeloptPack(codes, rows, cols), rows, cols); err != nil {
			t.Fatalf("%v: %v", shape, err)
		}
		if ours, err := PackModelOptInt4(codes, rows, cols); err != nil || !bytes.Equal(ours, modeloptPack(codes, rows, cols)) {
			t.Fatalf("%v: PackModelOptInt4 differs from the producer's packing (%v)", shape, err)
		}
		if !bytes.Equal(int8Bytes(got), int8Bytes(codes)) {
			t.Fatalf("%v: codes %v, packed from %v", shape, got, codes)
		}
	}
	for _, c := range []struct {
		rows, cols, n int
		want          string
	}{{3, 4, 8, "not an even number"}, {4, 4, 7, "have 7 bytes, the layout needs 8"}, {-2, 4, 0, "too large"}} {
		if err := UnpackModelOptInt4(make([]int8, 64), make([]byte, c.n), c.rows, c.cols); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d×%d from %d bytes: %v, want %q", c.rows, c.cols, c.n, err, c.want)
		}
	}
}
