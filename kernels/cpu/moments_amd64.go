package cpu

//go:noescape
func momentsAVX512(v *float32, n int, k float64, l *lanes)

// useMomentsAVX512 can be turned off by tests to compare both paths.
var hasMomentsKernel = hasAVX512

var useMomentsAVX512 = hasMomentsKernel

// addLanes runs lanes.add's loop on v (a multiple of 16 values), on AVX-512
// when the CPU has it.
func (l *lanes) addLanes(v []float32, k float64) {
	if useMomentsAVX512 && len(v) > 0 {
		momentsAVX512(&v[0], len(v), k, l)
		return
	}
	l.add(v, k)
}
