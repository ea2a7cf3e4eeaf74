package cuda

// The fake worker's dequant_int and stats run the kernels themselves:
// ptx/dequant_int.cu compiled for the CPU (ptx/testdata/host_int.cpp, as
// the ptx package's tests build it), so that the client's requests, the
// kernels' answers and the client's assembly of them are checked together
// on a machine without a GPU.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/quantscope/quantscope/kernels/cuda/wire"
)

// HostIntEnv names the host-compiled kernels' binary for the fake worker.
const hostIntEnv = "QSC_HOST_INT"

var hostInt struct {
	once            sync.Once
	dir, path, skip string // dir is removed by TestMain
}

// hostIntKernels builds ptx/testdata/host_int.cpp once and points the fake
// worker at it (or skips without a C++ compiler). It reads the driver and
// every source it includes, so that go test's cache reruns the tests when
// one changes (the compiler's reads are not seen by it).
func hostIntKernels(t *testing.T) {
	t.Helper()
	headers, _ := filepath.Glob("ptx/*.cuh")
	for _, src := range append([]string{"ptx/testdata/host_int.cpp", "ptx/testdata/host_shim.h", "ptx/dequant_int.cu"}, headers...) {
		if _, err := os.ReadFile(src); err != nil {
			t.Fatal(err)
		}
	}
	hostInt.once.Do(func() {
		cxx, err := exec.LookPath("g++")
		if err != nil {
			if cxx, err = exec.LookPath("c++"); err != nil {
				hostInt.skip = "no C++ compiler to build ptx/testdata/host_int.cpp"
				return
			}
		}
		if hostInt.dir, err = os.MkdirTemp("", "qshostint"); err != nil {
			hostInt.skip = err.Error()
			return
		}
		bin := filepath.Join(hostInt.dir, "host_int")
		out, err := exec.Command(cxx, "-std=c++17", "-O1", "-ffp-contract=off", "-o", bin, "ptx/testdata/host_int.cpp").CombinedOutput()
		if err != nil {
			hostInt.skip = fmt.Sprintf("building host_int.cpp: %v: %s", err, out)
			return
		}
		hostInt.path = bin
	})
	if hostInt.path == "" {
		if strings.HasPrefix(hostInt.skip, "no C++") {
			t.Skip(hostInt.skip)
		}
		t.Fatal(hostInt.skip)
	}
	t.Setenv(hostIntEnv, hostInt.path)
}

// fakeHostKernels answers dequant_int and stats with the host-compiled
// kernels (ok false for other operations).
func fakeHostKernels(req wire.Request, parts [][]byte) (resp wire.Response, out [][]byte, ok bool, err error) {
	if req.Op != wire.OpDequantInt && req.Op != wire.OpStats {
		return resp, nil, false, nil
	}
	bin := os.Getenv(hostIntEnv)
	if bin == "" {
		return resp, nil, true, fmt.Errorf("fake worker: %s needs %s", req.Op, hostIntEnv)
	}
	const blocks = 3
	n := req.Rows * req.Cols
	var args []string
	switch {
	case req.Op == wire.OpDequantInt || req.Source == wire.SourceInt:
		op := "dequant_int"
		if req.Op == wire.OpStats {
			op = "stats_int"
		}
		args = []string{op, fmt.Sprint(req.Layout), fmt.Sprint(req.Bits), fmt.Sprint(req.Rows), fmt.Sprint(req.Cols), fmt.Sprint(req.Groups), fmt.Sprint(len(parts[0]) / 4),
			"0", fmt.Sprint(n), fmt.Sprint(blocks)}
	case req.Source == wire.SourceNVFP4 || req.Source == wire.SourceMXFP4:
		n = 2 * int64(len(parts[0]))
		args = []string{"stats_" + req.Source, fmt.Sprint(n), fmt.Sprintf("%.9g", req.Global), "0", fmt.Sprint(n), fmt.Sprint(blocks)}
	case req.Source == wire.SourceFP8:
		inv, e5 := 0, 0
		if req.Inv {
			inv = 1
		}
		if req.E5M2 {
			e5 = 1
		}
		args = []string{"stats_fp8", fmt.Sprint(req.Rows), fmt.Sprint(req.Cols), fmt.Sprint(req.R), fmt.Sprint(req.C), fmt.Sprint(inv), fmt.Sprint(e5), "0", fmt.Sprint(n), fmt.Sprint(blocks)}
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin = bytes.NewReader(bytes.Join(parts, nil))
	y, err := cmd.Output()
	if err != nil {
		return resp, nil, true, fmt.Errorf("host kernels %v: %v", args, err)
	}
	if req.Op == wire.OpDequantInt {
		return resp, [][]byte{y}, true, nil
	}
	k := blocks * wire.StatsPartial
	return resp, [][]byte{y[:k], y[k:]}, true, nil
}
