//go:build !amd64

package cpu

var useMomentsAVX512 = false

func (l *lanes) addLanes(v []float32, k float64) { l.add(v, k) }
