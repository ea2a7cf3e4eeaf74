//go:build !unix

package cpu_test

import "time"

// cpuTime is not measured here: the CPU-time ratio reads NaN.
func cpuTime() time.Duration { return 0 }
