// Package cpu is the reference kernels.Backend: plain Go on every core. Every
// other backend is tested against it.
package cpu

import (
	"fmt"
	"runtime"
)

// Backend runs kernels on the CPU with up to Workers goroutines.
type Backend struct {
	Workers int
}

// New returns a CPU backend that uses every core.
func New() *Backend { return &Backend{Workers: runtime.GOMAXPROCS(0)} }

// Name says where the work runs.
func (b *Backend) Name() string { return fmt.Sprintf("cpu (%d cores)", b.workers()) }

func (b *Backend) workers() int {
	if b.Workers < 1 {
		return 1
	}
	return b.Workers
}
