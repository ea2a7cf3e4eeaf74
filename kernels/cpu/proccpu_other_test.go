//go:build !unix

package cpu

import "time"

// procCPU is not measured here: the CPU-time ratio reads NaN.
func procCPU() time.Duration { return 0 }
