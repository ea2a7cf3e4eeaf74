//go:build !amd64

package cpu

var hasMomentsKernel, useMomentsAVX512 = false, false

func (l *lanes) addLanes(v []float32, k float64) { l.add(v, k) }
