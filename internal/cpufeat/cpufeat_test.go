package cpufeat

import (
	"os"
	"runtime"
	"strings"
	"testing"
)

// The probe agrees with what Linux reports in /proc/cpuinfo's flags (which
// the kernel also clears for state it does not save).
func TestAgreesWithProcCPUInfo(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("compares with /proc/cpuinfo on linux/amd64 only (this is %s/%s)", runtime.GOOS, runtime.GOARCH)
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	var flags map[string]bool
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			flags = map[string]bool{}
			for _, f := range strings.Fields(v) {
				flags[f] = true
			}
			break
		}
	}
	if flags == nil {
		t.Skip("no flags line in /proc/cpuinfo")
	}
	for name, got := range map[string]bool{"avx2": AVX2, "avx512f": AVX512, "f16c": F16C} {
		if got != flags[name] {
			t.Errorf("%s: probe says %v, /proc/cpuinfo says %v", name, got, flags[name])
		}
	}
}
