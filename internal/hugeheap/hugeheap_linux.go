package hugeheap

import (
	"runtime"
	"syscall"
	"unsafe"
)

func prepare(n int) bool {
	if n <= 0 || unsafe.Sizeof(uintptr(0)) < 8 { // no spare address space on 32-bit systems
		return false
	}
	b := make([]byte, n) // a large object: a fresh mapping, not touched
	err := syscall.Madvise(b, syscall.MADV_HUGEPAGE)
	b = nil
	runtime.GC() // frees the span; the flag stays on the mapping
	return err == nil
}
