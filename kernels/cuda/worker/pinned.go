//go:build cuda

package main

// gorgonia.org/cu has no page-locked host allocation: these few lines of cgo
// call cuMemAllocHost for the staging buffers, so that copies to and from
// the device run asynchronously at full PCIe rate.

// #cgo LDFLAGS: -lcuda
// #include <cuda.h>
import "C"

import (
	"fmt"
	"unsafe"
)

// pinned is a page-locked host buffer.
type pinned struct {
	p unsafe.Pointer
	n int
}

func allocPinned(n int) (*pinned, error) {
	var p unsafe.Pointer
	if r := C.cuMemAllocHost(&p, C.size_t(n)); r != C.CUDA_SUCCESS {
		return nil, fmt.Errorf("cuMemAllocHost(%d): CUresult %d", n, int(r))
	}
	return &pinned{p: p, n: n}, nil
}

// bytes is the buffer as a Go slice (C memory: no Go pointers inside).
func (b *pinned) bytes() []byte { return unsafe.Slice((*byte)(b.p), b.n) }

func (b *pinned) free() { C.cuMemFreeHost(b.p) }
