package ptx

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The kernels' sources compiled for the CPU: each testdata/<driver>.cpp
// #includes some .cu files and runs their kernels one block (or one
// emulated warp group) at a time, reading inputs on stdin. The tests compare
// what they print with the CPU backend: the kernels' logic and float32
// order, without a GPU. The GPU's own arithmetic is the parity tests'
// (kernels/cuda/gpu_*_test.go) to check.

// hostBuilds holds each driver's binary, built once a test run into one
// temporary folder that TestMain removes.
var hostBuilds struct {
	mu   sync.Mutex
	dir  string
	bins map[string]string
	errs map[string]string
}

// TestMain removes the host builds after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if hostBuilds.dir != "" {
		os.RemoveAll(hostBuilds.dir)
	}
	os.Exit(code)
}

// buildHost returns testdata/<driver>.cpp built with std (c++17, c++20)
// and extra flags, once a run; it skips the test without a C++ compiler.
// It reads the driver, the shim, every header and each source it
// includes, so that go test's cache reruns the tests when one changes.
func buildHost(t *testing.T, driver, std string, sources []string, extra ...string) string {
	t.Helper()
	headers, _ := filepath.Glob("*.cuh")
	for _, src := range append(append([]string{"testdata/" + driver + ".cpp", "testdata/host_shim.h"}, headers...), sources...) {
		if _, err := os.ReadFile(src); err != nil {
			t.Fatal(err)
		}
	}
	cxx, err := exec.LookPath("g++")
	if err != nil {
		if cxx, err = exec.LookPath("c++"); err != nil {
			t.Skipf("no C++ compiler to build testdata/%s.cpp", driver)
		}
	}
	h := &hostBuilds
	h.mu.Lock()
	defer h.mu.Unlock()
	if bin, ok := h.bins[driver]; ok {
		return bin
	}
	if msg, ok := h.errs[driver]; ok {
		t.Fatal(msg)
	}
	if h.dir == "" {
		if h.dir, err = os.MkdirTemp("", "qs-ptx-host"); err != nil {
			t.Fatal(err)
		}
		h.bins, h.errs = map[string]string{}, map[string]string{}
	}
	bin := filepath.Join(h.dir, driver)
	args := append([]string{"-std=" + std, "-O1", "-ffp-contract=off"}, extra...)
	args = append(args, "-o", bin, "testdata/"+driver+".cpp")
	if out, err := exec.Command(cxx, args...).CombinedOutput(); err != nil {
		h.errs[driver] = fmt.Sprintf("building testdata/%s.cpp: %v\n%s", driver, err, out)
		t.Fatal(h.errs[driver])
	}
	h.bins[driver] = bin
	return bin
}
