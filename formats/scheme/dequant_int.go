package scheme

import (
	"fmt"
	"math"

	"github.com/quantscope/quantscope/formats/packing"
)

// GPTQ and AWQ pack along the input dimension, so every logical row (an
// output channel) shares each stored word with its neighbours: a window of
// input columns is what can be read narrowly, not a band of rows.

// groupOf maps input column i to its scale group: g_idx when stored, else i/size.
func (d *dq) groupIndex(role string, in, groups, size int) ([]int32, error) {
	idx := make([]int32, in)
	if t, ok := d.m.infos.lookup(role); ok {
		if t.elements() != uint64(in) {
			return nil, d.fail(t, "g_idx", fmt.Sprintf("has %d entries for %d input columns", t.elements(), in))
		}
		b, err := d.all(t)
		if err != nil {
			return nil, err
		}
		v, err := d.floats(t, b)
		if err != nil {
			return nil, err
		}
		for i, x := range v {
			if x < 0 || int(x) >= groups || x != float32(math.Trunc(float64(x))) {
				return nil, d.fail(t, "g_idx", fmt.Sprintf("entry %d is %v, outside 0..%d", i, x, groups-1))
			}
			idx[i] = int32(x)
		}
		return idx, nil
	}
	if size <= 0 {
		size = (in + groups - 1) / groups
	}
	for i := range idx {
		idx[i] = int32(min(i/max(size, 1), groups-1))
	}
	return idx, nil
}

// intMatrix reads GPTQ/AWQ's scales and the unsigned zero-point codes, both [groups, out].
func (d *dq) scalesAndZeros(unpackZeros func(dst []uint8, b []byte, groups int) error) (scales []float32, zeros []uint8, groups int, err error) {
	sc, err := d.need("scales")
	if err != nil {
		return nil, nil, 0, err
	}
	out := d.rows
	if len(sc.Shape) != 2 || sc.Shape[1] != uint64(out) || sc.Shape[0] == 0 {
		return nil, nil, 0, d.fail(sc, "scale-shape", fmt.Sprintf("want [groups, %d], shape is %v", out, sc.Shape))
	}
	groups = int(sc.Shape[0])
	sb, err := d.all(sc)
	if err != nil {
		return nil, nil, 0, err
	}
	if scales, err = d.floats(sc, sb); err != nil {
		return nil, nil, 0, err
	}
	if z, ok := d.m.infos.lookup("qzeros"); ok {
		zb, err := d.all(z)
		if err != nil {
			return nil, nil, 0, err
		}
		zeros = make([]uint8, groups*out)
		if err := unpackZeros(zeros, zb, groups); err != nil {
			return nil, nil, 0, d.fail(z, "qzeros", err.Error())
		}
	}
	return scales, zeros, groups, nil
}

func (d *dq) gptq() ([]float32, error) {
	qw, err := d.need("qweight")
	if err != nil {
		return nil, err
	}
	in, out, bits := d.cols, d.rows, d.m.Bits
	if _, err := packing.GPTQWeightRows(in, bits); err != nil {
		return nil, d.fail(qw, "qweight", err.Error())
	}
	r0, r1 := packing.GPTQWordRows(d.c0, d.c1, bits)
	qb, err := d.rowBytes(qw, 4*out, r0, r1)
	if err != nil {
		return nil, err
	}
	w := d.c1 - d.c0
	codes := make([]uint8, w*(d.hi-d.lo))
	if err := packing.UnpackGPTQColumns(codes, qb, out, bits, d.c0, d.c1, d.lo, d.hi); err != nil {
		return nil, d.fail(qw, "qweight", err.Error())
	}
	scales, zeros, groups, err := d.scalesAndZeros(func(dst []uint8, b []byte, groups int) error {
		return packing.UnpackRowBits(dst, b, groups, out, bits)
	})
	if err != nil {
		return nil, err
	}
	gi, err := d.groupIndex("g_idx", in, groups, d.m.GroupSize)
	if err != nil {
		return nil, err
	}
	zeroAdd := float32(0)
	if d.m.Layout == LayoutGPTQ {
		zeroAdd = 1 // v1 stores z − 1
	}
	mid := float32(int(1) << (bits - 1))
	n := d.hi - d.lo
	res := make([]float32, n*w)
	for o := d.lo; o < d.hi; o++ {
		row := res[(o-d.lo)*w : (o-d.lo+1)*w]
		for i := d.c0; i < d.c1; i++ {
			g := int(gi[i])
			z := mid
			if zeros != nil {
				z = float32(zeros[g*out+o]) + zeroAdd
			}
			row[i-d.c0] = scales[g*out+o] * (float32(codes[(i-d.c0)*n+(o-d.lo)]) - z)
		}
	}
	return res, nil
}

func (d *dq) awq() ([]float32, error) {
	qw, err := d.need("qweight")
	if err != nil {
		return nil, err
	}
	in, out := d.cols, d.rows
	if out%8 != 0 {
		return nil, d.fail(qw, "qweight", fmt.Sprintf("%d outputs are not a multiple of 8", out))
	}
	qb, err := d.rowBytes(qw, out/2, d.c0, d.c1) // qweight rows are inputs
	if err != nil {
		return nil, err
	}
	w := d.c1 - d.c0
	codes := make([]uint8, w*out)
	if err := packing.UnpackAWQ(codes, qb, w, out); err != nil {
		return nil, d.fail(qw, "qweight", err.Error())
	}
	scales, zeros, groups, err := d.scalesAndZeros(func(dst []uint8, b []byte, groups int) error {
		return packing.UnpackAWQ(dst, b, groups, out)
	})
	if err != nil {
		return nil, err
	}
	if in%groups != 0 {
		return nil, d.fail(d.m.infos.get("scales"), "scale-shape", fmt.Sprintf("%d groups do not divide %d inputs", groups, in))
	}
	size := in / groups
	res := make([]float32, (d.hi-d.lo)*w)
	for o := d.lo; o < d.hi; o++ {
		row := res[(o-d.lo)*w : (o-d.lo+1)*w]
		for i := d.c0; i < d.c1; i++ {
			g := i / size
			z := float32(8)
			if zeros != nil {
				z = float32(zeros[g*out+o])
			}
			row[i-d.c0] = scales[g*out+o] * (float32(codes[(i-d.c0)*out+o]) - z)
		}
	}
	return res, nil
}
