//go:build linux

package hugeheap

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// After Prepare, the heap's next large allocations land in the advised
// range: the mapping holding them carries the `hg` (MADV_HUGEPAGE) flag in
// /proc/self/smaps. Without Prepare the Go heap has no such mapping.
func TestPrepareAdvisesTheHeapNextUsed(t *testing.T) {
	if !Prepare(64 << 20) {
		t.Skip("this kernel refuses MADV_HUGEPAGE (no transparent huge page support): nothing to check")
	}
	// The page allocator takes the lowest free run that fits: a run freed
	// below the advised range by an earlier collection (the test binary's
	// own garbage, a busy machine's timing) can take one of them, so most,
	// not all, must land in the advised range; without Prepare none do.
	var held [][]byte
	in := 0
	var last string
	for range 8 {
		b := make([]byte, 4<<20)
		held = append(held, b)
		flags, err := vmFlags(uintptr(unsafe.Pointer(&b[0])))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(" "+flags+" ", " hg ") {
			in++
		} else {
			last = flags
		}
	}
	if in < 6 {
		t.Fatalf("%d of 8 allocations of 4 MiB after Prepare lie in a mapping with hg (one without: flags %q)", in, last)
	}
	_ = held
}

// vmFlags returns the VmFlags line of the mapping that holds addr.
func vmFlags(addr uintptr) (string, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if _, err := fmt.Sscanf(line, "%x-%x ", &lo, &hi); err == nil && strings.Contains(line, " ") && !strings.HasSuffix(strings.Fields(line)[0], ":") {
			in = lo <= addr && addr < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmFlags:")), nil
		}
	}
	return "", fmt.Errorf("no mapping in /proc/self/smaps holds %#x", addr)
}
