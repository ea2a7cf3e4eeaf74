package main

import (
	"os"
	"syscall"
)

// peakKiB is a finished child's peak resident set in KiB (Linux's
// ru_maxrss).
func peakKiB(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss
	}
	return 0
}
