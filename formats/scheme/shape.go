package scheme

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
)

// Shape arithmetic on header values. A header may claim any size for one
// dimension beside a zero-sized other, and weight_shape holds whatever its
// writer put there: these helpers neither wrap nor divide by zero.

// packedWidth is the logical shape a packed weight's last dimension can
// hold: two E2M1 codes a byte, or the int codes of its I32 words in layout l.
func packedWidth(m *Module, p *TensorInfo, l packing.CTLayout) []uint64 {
	if p.DType == safetensors.U8 {
		return withLast(p.Shape, func(n uint64) uint64 { return saturatingMul(n, 2) })
	}
	b := max(m.Bits, 1)
	return withLast(p.Shape, func(words uint64) uint64 {
		if l == ctPerWord {
			return saturatingMul(words, uint64(32/b))
		}
		return saturatingMul(words, 32) / uint64(b)
	})
}

// weightShapeValues reads the module's weight_shape values, when there are
// some and the caller can have them.
func weightShapeValues(m *Module, shapes ShapeValues) ([]int64, bool) {
	if shapes == nil {
		return nil, false
	}
	ws, ok := m.infos.lookup("weight_shape")
	if !ok {
		return nil, false
	}
	v, ok := shapes(ws.Name)
	return v, ok && len(v) > 0
}

// badWeightShape says why weight_shape values cannot be the logical shape
// of a packed weight whose rows hold bound's last dimension at most, or ""
// when they can: no negative dimension, a product that fits 64 bits, and a
// width the packed words hold.
func badWeightShape(v []int64, bound []uint64) string {
	n := uint64(1)
	for _, x := range v {
		if x < 0 {
			return "has a negative dimension"
		}
		hi, lo := bits.Mul64(n, uint64(x))
		if hi != 0 {
			return "overflows 64 bits"
		}
		n = lo
	}
	if len(bound) == 0 {
		return "describes a scalar packed weight"
	}
	if w, most := uint64(v[len(v)-1]), bound[len(bound)-1]; w > most {
		return fmt.Sprintf("is %d values wide, more than the packed width holds (%d)", w, most)
	}
	return ""
}

// saturatingMul is a·b, or the largest uint64 when that overflows.
func saturatingMul(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

// blockOf is the block that tiles n values with k scales, ⌈n/k⌉, or 0 when
// there is none: no values, no scales, or a block past an int32.
func blockOf(n, k uint64) int {
	b := ceilDiv(n, k)
	if b > math.MaxInt32 {
		return 0
	}
	return int(b)
}

// ceilDiv is ⌈n/k⌉, 0 for k = 0, without forming n + k − 1 (which wraps for
// the dimensions a header can claim beside a zero one).
func ceilDiv(n, k uint64) uint64 {
	if k == 0 {
		return 0
	}
	q := n / k
	if n%k != 0 {
		q++
	}
	return q
}
