package cpu

//go:noescape
func momentsAVX512(v *float32, n int, k float64, l *lanes)

//go:noescape
func momentsAVX2(v *float32, n int, k float64, l *lanes)

// useMomentsAVX512 can be turned off by tests to compare both paths.
var hasMomentsKernel = hasAVX2

var useMomentsAVX512 = hasMomentsKernel

// addLanes runs lanes.add's loop on v (a multiple of 16 values), on AVX-512
// or AVX2 when the CPU has it.
func (l *lanes) addLanes(v []float32, k float64) {
	switch {
	case len(v) == 0 || !useMomentsAVX512:
		l.add(v, k)
	case hasAVX512:
		momentsAVX512(&v[0], len(v), k, l)
	default:
		momentsAVX2(&v[0], len(v), k, l)
	}
}
