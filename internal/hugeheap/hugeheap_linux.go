package hugeheap

import (
	"runtime"
	"syscall"
)

func prepare(n int) bool {
	if n <= 0 {
		return false
	}
	b := make([]byte, n) // a large object: a fresh mapping, not touched
	err := syscall.Madvise(b, syscall.MADV_HUGEPAGE)
	b = nil
	runtime.GC() // frees the span; the flag stays on the mapping
	return err == nil
}
