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
	var held [][]byte
	for range 8 {
		b := make([]byte, 4<<20)
		held = append(held, b)
		flags, err := vmFlags(uintptr(unsafe.Pointer(&b[0])))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(" "+flags+" ", " hg ") {
			t.Fatalf("a 4 MiB allocation after Prepare lies in a mapping with flags %q, without hg", flags)
		}
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
