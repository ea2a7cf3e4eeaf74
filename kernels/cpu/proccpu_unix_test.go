//go:build unix

package cpu

import (
	"syscall"
	"time"
)

// procCPU is the process's user + system CPU time so far.
func procCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
