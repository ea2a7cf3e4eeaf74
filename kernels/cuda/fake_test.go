package cuda

// A fake worker for the client's tests: this test binary, started with
// QSC_FAKE_WORKER set, speaks the wire protocol and computes on the CPU
// backend, or misbehaves as the mode says.

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/kernels/cuda/wire"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv("QSC_FAKE_WORKER"); mode != "" {
		os.Exit(fakeWorker(mode))
	}
	code := m.Run()
	for _, dir := range []string{hostInt.dir, realWorker.dir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

func fakeWorker(mode string) int {
	switch mode {
	case "text": // what gorgonia.org/cu prints when cuInit fails
		fmt.Println(`Error in initialization, please refer to "https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__INITIALIZE.html" for details on: no CUDA-capable device is detected`)
		return 1
	case "exit":
		return 2
	}
	free := int64(80 << 30)
	if mode == "lowmem" {
		free = 1 << 20
	}
	hello := wire.Hello{Name: "Fake GPU", TotalMem: 96 << 30, FreeMem: free, Major: 9}
	if mode == "multi" {
		// One fake GPU per entry of QSC_FAKE_FREE (MiB free each), this
		// process being the one -device names; each op it runs is logged to
		// QSC_FAKE_LOG/dev<N>.
		frees := strings.Split(os.Getenv("QSC_FAKE_FREE"), ",")
		dev := 0
		for i, a := range os.Args {
			if a == "-device" && i+1 < len(os.Args) {
				dev, _ = strconv.Atoi(os.Args[i+1])
			}
		}
		mib, _ := strconv.ParseInt(frees[dev], 10, 64)
		free = mib << 20
		hello = wire.Hello{Name: fmt.Sprintf("Fake GPU %d", dev), Device: dev, Devices: len(frees), TotalMem: 96 << 30, FreeMem: free, Major: 9}
	}
	be := cpu.New()
	err := wire.Serve(os.Stdin, os.Stdout, hello, func(req wire.Request, parts [][]byte) (wire.Response, [][]byte, error) {
		if req.Op == wire.OpInfo {
			return wire.Response{FreeMem: free, TotalMem: hello.TotalMem}, nil, nil
		}
		if mode == "multi" {
			f, err := os.OpenFile(filepath.Join(os.Getenv("QSC_FAKE_LOG"), fmt.Sprintf("dev%d", hello.Device)), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				fmt.Fprintln(f, req.Op)
				f.Close()
			}
		}
		switch mode {
		case "die":
			if _, err := os.Stat(os.Getenv("QSC_FAKE_DIED")); err != nil {
				os.WriteFile(os.Getenv("QSC_FAKE_DIED"), nil, 0o644)
				fmt.Fprintln(os.Stderr, "fake worker: an illegal memory access")
				os.Exit(3)
			}
		case "hang":
			time.Sleep(time.Hour) // stdin closing does not end the job: needs the kill
		}
		return fakeCompute(be, req, parts)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func fakeCompute(be *cpu.Backend, req wire.Request, parts [][]byte) (wire.Response, [][]byte, error) {
	ctx := context.Background()
	if r, out, ok, err := fakeHostKernels(req, parts); ok { // hostkernels_test.go
		return r, out, err
	}
	switch req.Op {
	case wire.OpDequantFP8:
		g := FP8Grid{Rows: int(req.Rows), Cols: int(req.Cols), R: int(req.R), C: int(req.C), E5M2: req.E5M2, Inverse: req.Inv}
		out, err := (&Backend{Backend: be, Path: "/nonexistent"}).DequantFP8(ctx, parts[0], f32s(parts[1]), g)
		return wire.Response{}, [][]byte{f32Bytes(out)}, err
	case wire.OpDequantNVFP4:
		out := make([]float32, 2*len(parts[0]))
		for i := range out {
			out[i] = numeric.E2M1ToFloat32(parts[0][i/2]>>(4*(i&1))&15) * (numeric.E4M3ToFloat32(parts[1][i/16]) * req.Global)
		}
		return wire.Response{}, [][]byte{f32Bytes(out)}, nil
	case wire.OpDequantMXFP4:
		out := make([]float32, 2*len(parts[0]))
		err := packing.DecodeMXFP4(out, parts[0], parts[1])
		return wire.Response{}, [][]byte{f32Bytes(out)}, err
	case wire.OpQuantNVFP4:
		w := kernels.Matrix{Rows: int(req.Rows), Cols: int(req.Cols), Data: f32s(parts[0])}
		r, err := be.QuantizeNVFP4(ctx, w, kernels.NVFP4Options{Recipe: req.Recipe}, nil)
		if err != nil {
			return wire.Response{}, nil, err
		}
		if r.Scale2 != req.Global {
			return wire.Response{}, nil, fmt.Errorf("global scale %g, the client sent %g", r.Scale2, req.Global)
		}
		return wire.Response{Scale2: r.Scale2}, [][]byte{r.Packed, r.Scales}, nil
	case wire.OpW4AFP8:
		T, K, N := int(req.T), int(req.K), int(req.N)
		w := &kernels.W4AWeight{Name: "fake", In: K, Out: N, Codes: make([]int8, N*K), Scales: f32s(parts[3])}
		for i, b := range parts[2] {
			w.Codes[2*i], w.Codes[2*i+1] = int8(b&15)-8, int8(b>>4)-8
		}
		y, err := be.W4AFP8Linear(ctx, &kernels.FP8Tokens{Rows: T, Cols: K, Codes: parts[0], Scales: f32s(parts[1])}, w)
		return wire.Response{}, [][]byte{f32Bytes(y.Data)}, err
	}
	if r, out, ok, err := fakeQuant2(be, req, parts); ok {
		return r, out, err
	}
	if r, out, ok, err := fakeForward(be, req, parts); ok { // forward_test.go
		return r, out, err
	}
	return wire.Response{}, nil, fmt.Errorf("fake worker: %s not implemented", req.Op)
}

func f32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}
