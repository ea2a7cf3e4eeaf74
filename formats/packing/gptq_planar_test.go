package packing

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// refPlanarUnpackRows transliterates GPT-QModel's planar_unpack_rows
// (utils/planar_packing.py): words [blocks, bits, cols]; for each plane
// (width, offset), low first, rows [row, row+width) of a block hold
// codes k = m·(32/width) + s at shift width·s of word row+m.
func refPlanarUnpackRows(packed []uint32, rows, cols, bits int) []uint8 {
	planes := map[int][][2]int{2: {{2, 0}}, 3: {{2, 0}, {1, 2}}, 4: {{4, 0}}, 5: {{4, 0}, {1, 4}}, 6: {{4, 0}, {2, 4}}, 7: {{4, 0}, {2, 4}, {1, 6}}, 8: {{8, 0}}}
	blocks := rows / bits
	out := make([]uint8, blocks*32*cols)
	for b := range blocks {
		row := 0
		for _, p := range planes[bits] {
			width, offset := p[0], p[1]
			factor := 32 / width
			for m := range width {
				for s := range factor {
					k := m*factor + s
					for c := range cols {
						word := packed[(b*bits+row+m)*cols+c]
						code := (word >> (width * s)) & (1<<width - 1)
						out[(b*32+k)*cols+c] |= uint8(code << offset)
					}
				}
			}
			row += width
		}
	}
	return out
}

func words(b []byte) []uint32 {
	w := make([]uint32, len(b)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return w
}

// Planar qweight and qzeros: what PackGPTQPlanarWeight writes, GPT-QModel's
// own unpacking reads back, every window of the unpacker agrees with it,
// and at 2, 4 and 8 bits the words are the continuous layout's.
func TestGPTQPlanar(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const in, out = 96, 40
	for bits := 2; bits <= 8; bits++ {
		codes := make([]uint8, in*out)
		for i := range codes {
			codes[i] = uint8(r.IntN(1 << bits))
		}
		codes[0], codes[1] = 0, uint8(1<<bits-1)
		qw, err := PackGPTQPlanarWeight(codes, in, out, bits)
		if err != nil {
			t.Fatal(err)
		}
		if len(qw) != 4*in*bits/32*out {
			t.Fatalf("%d bits: %d bytes, want the standard shape's %d", bits, len(qw), 4*in*bits/32*out)
		}
		if got := refPlanarUnpackRows(words(qw), in*bits/32, out, bits); !bytes.Equal(got, codes) {
			t.Fatalf("%d bits: GPT-QModel's unpacking reads other codes", bits)
		}
		if bits == 2 || bits == 4 || bits == 8 {
			if cont, _ := PackGPTQWeight(codes, in, out, bits); !bytes.Equal(cont, qw) {
				t.Fatalf("%d bits: planar words differ from the continuous layout's", bits)
			}
		}
		for _, win := range [][4]int{{0, in, 0, out}, {33, 70, 5, 6}, {31, 33, 0, out}, {64, 96, 39, 40}} {
			i0, i1, o0, o1 := win[0], win[1], win[2], win[3]
			r0, r1 := GPTQPlanarWordRows(i0, i1, bits)
			dst := make([]uint8, (i1-i0)*(o1-o0))
			if err := UnpackGPTQPlanarColumns(dst, qw[4*r0*out:4*r1*out], out, bits, i0, i1, o0, o1); err != nil {
				t.Fatal(err)
			}
			for i := i0; i < i1; i++ {
				for o := o0; o < o1; o++ {
					if got, want := dst[(i-i0)*(o1-o0)+o-o0], codes[i*out+o]; got != want {
						t.Fatalf("%d bits window %v: [%d, %d] = %d, want %d", bits, win, i, o, got, want)
					}
				}
			}
		}
		// qzeros [groups, 64] along dim 1: GPT-QModel's planar_unpack_cols is
		// unpack_rows of the transpose
		const groups, cols = 3, 64
		z := make([]uint8, groups*cols)
		for i := range z {
			z[i] = uint8(r.IntN(1 << bits))
		}
		qz, err := PackPlanarRowBits(z, groups, cols, bits)
		if err != nil {
			t.Fatal(err)
		}
		zw := words(qz)
		p := cols * bits / 32
		tr := make([]uint32, p*groups)
		for g := range groups {
			for k := range p {
				tr[k*groups+g] = zw[g*p+k]
			}
		}
		ref := refPlanarUnpackRows(tr, p, groups, bits) // [cols, groups]
		got := make([]uint8, groups*cols)
		if err := UnpackPlanarRowBits(got, qz, groups, cols, bits); err != nil {
			t.Fatal(err)
		}
		for g := range groups {
			for c := range cols {
				if got[g*cols+c] != z[g*cols+c] || ref[c*groups+g] != z[g*cols+c] {
					t.Fatalf("%d bits qzeros [%d, %d]: %d, GPT-QModel %d, want %d", bits, g, c, got[g*cols+c], ref[c*groups+g], z[g*cols+c])
				}
			}
		}
	}
	if _, err := PackGPTQPlanarWeight(make([]uint8, 40), 40, 1, 3); err == nil {
		t.Error("40 inputs (not whole chunks of 32) accepted")
	}
	if err := UnpackGPTQPlanarColumns(make([]uint8, 32), make([]byte, 7), 1, 3, 0, 32, 0, 1); err == nil {
		t.Error("a short qweight accepted")
	}
}
