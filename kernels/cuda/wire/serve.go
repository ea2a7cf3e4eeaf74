package wire

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
)

// Limits of one request on the worker: its staging buffers (each step of
// a request, and the whole of a W4A GEMM, must fit) and the W4A kernel's
// shared memory (a token's K codes, under the 48 KiB a kernel gets without
// opting in) and grid (a block row per token).
const (
	MaxStep = 288 << 20
	W4AMaxK = 32768
	W4AMaxT = 65535
)

// Handler computes one request whose parts Check accepted.
type Handler func(req Request, parts [][]byte) (Response, [][]byte, error)

// MaxRequest bounds a request's payload (the largest weight a job sends).
const MaxRequest = 64 << 30

// Serve writes hello, then answers requests from in until it ends: the
// worker's main loop. A handler's error goes back in Response.Error; a frame
// that cannot be read ends Serve with that error.
func Serve(in io.Reader, out io.Writer, hello Hello, h Handler) error {
	hello.Op, hello.Version = OpHello, Version
	if err := Write(out, hello); err != nil {
		return err
	}
	for {
		hb, payload, err := Read(in, MaxRequest)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var req Request
		if err := json.Unmarshal(hb, &req); err != nil {
			return fmt.Errorf("wire: bad request header: %w", err)
		}
		resp, parts, err := func() (Response, [][]byte, error) {
			parts, err := Split(payload, req.Parts)
			if err != nil {
				return Response{}, nil, err
			}
			if err := Check(req, parts); err != nil {
				return Response{}, nil, err
			}
			return h(req, parts)
		}()
		resp.ID = req.ID
		if err != nil {
			resp, parts = Response{ID: req.ID, Error: err.Error()}, nil
		}
		resp.Parts = Lens(parts...)
		if err := Write(out, resp, parts...); err != nil {
			return err
		}
	}
}

// Check validates a request's parameters and parts' sizes, so that a
// kernel never reads or writes out of bounds.
func Check(req Request, parts [][]byte) error {
	want := func(sizes ...int64) error { return wantParts(req.Op, parts, sizes...) }
	const lim = 1 << 40
	dims := func(v ...int64) error { return inRange(req.Op, lim, v...) }
	switch req.Op {
	case OpInfo:
		return want()
	case OpDequantFP8:
		if err := dims(req.Rows, req.Cols, req.R, req.C); err != nil {
			return err
		}
		if req.Rows*req.Cols > lim {
			return fmt.Errorf("%s: %d×%d values is too many", req.Op, req.Rows, req.Cols)
		}
		grid := (req.Rows + req.R - 1) / req.R * ((req.Cols + req.C - 1) / req.C)
		return want(req.Rows*req.Cols, 4*grid)
	case OpDequantNVFP4, OpDequantMXFP4:
		block := int64(16)
		if req.Op == OpDequantMXFP4 {
			block = 32
		}
		if len(parts) != 2 {
			return fmt.Errorf("%s: %d payload parts, want 2", req.Op, len(parts))
		}
		n := 2 * int64(len(parts[0]))
		if n == 0 || n%block != 0 {
			return fmt.Errorf("%s: %d values are not whole %d-value blocks", req.Op, n, block)
		}
		if req.Op == OpDequantNVFP4 && !(math.Abs(float64(req.Global)) <= math.MaxFloat32) {
			return fmt.Errorf("%s: global scale %g is not finite", req.Op, req.Global)
		}
		return want(n/2, n/block)
	case OpQuantNVFP4:
		if err := dims(req.Rows, req.Cols); err != nil {
			return err
		}
		if req.Cols%16 != 0 || req.Rows*req.Cols > lim {
			return fmt.Errorf("%s: [%d, %d] is not whole 16-value blocks", req.Op, req.Rows, req.Cols)
		}
		if req.Recipe != "max" && req.Recipe != "mse" {
			return fmt.Errorf("%s: recipe %q runs on the CPU only", req.Op, req.Recipe)
		}
		if !(req.Global > 0 && req.Global <= math.MaxFloat32) {
			return fmt.Errorf("%s: global scale %g is not positive and finite", req.Op, req.Global)
		}
		return want(4 * req.Rows * req.Cols)
	case OpQuantFP8, OpQuantNVFP4GPTQ, OpQuantNVFP4LH:
		return checkQuant2(req, parts, want, dims)
	case OpDequantInt, OpStats:
		return checkInt(req, parts)
	case OpW4AFP8:
		if err := dims(req.T, req.K, req.N); err != nil {
			return err
		}
		if req.K%128 != 0 || req.K > W4AMaxK || req.T > W4AMaxT {
			return fmt.Errorf("%s: input width %d is not a multiple of 128 up to %d, or %d tokens exceed %d", req.Op, req.K, W4AMaxK, req.T, W4AMaxT)
		}
		if W4ABytes(req.T, req.K, req.N) > MaxStep {
			return fmt.Errorf("%s: [%d, %d]×[%d, %d] needs %d MiB, over the worker's %d MiB staging", req.Op, req.T, req.K, req.N, req.K, W4ABytes(req.T, req.K, req.N)>>20, MaxStep>>20)
		}
		return want(req.T*req.K, 4*req.T, req.N*req.K/2, 4*req.N*(req.K/128))
	case OpW4ANVFP4, OpW4AFP8TC, OpW4ANVFP4TC, OpRMSNorm, OpRoPE, OpAttention, OpSwiGLU, OpChannelStats, OpBlockHessians, OpAbsHist:
		return checkForward(req, parts)
	}
	return fmt.Errorf("unknown operation %q", req.Op)
}

// W4ABytes is what a W4A-FP8 request and its answer occupy in staging.
func W4ABytes(T, K, N int64) int64 { return T*K + 4*T + N*K/2 + 4*N*(K/128) + 4*T*N }

// wantParts checks the number and the sizes of a request's payload parts.
func wantParts(op string, parts [][]byte, sizes ...int64) error {
	if len(parts) != len(sizes) {
		return fmt.Errorf("%s: %d payload parts, want %d", op, len(parts), len(sizes))
	}
	for i, s := range sizes {
		if int64(len(parts[i])) != s {
			return fmt.Errorf("%s: part %d holds %d bytes, want %d", op, i, len(parts[i]), s)
		}
	}
	return nil
}

// inRange checks that every dimension lies in (0, lim].
func inRange(op string, lim int64, v ...int64) error {
	for _, x := range v {
		if x <= 0 || x > lim {
			return fmt.Errorf("%s: dimension %d out of range", op, x)
		}
	}
	return nil
}
