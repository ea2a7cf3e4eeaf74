//go:build cuda

package main

import (
	"fmt"
	"math"
	"os"
	"time"
	"unsafe"

	"github.com/quantscope/quantscope/kernels/cuda/ptx"
	"github.com/quantscope/quantscope/kernels/cuda/wire"
	"gorgonia.org/cu"
)

// chunkBytes is the largest input one pipeline step stages.
const chunkBytes = wire.MaxStep / 10

// gpu is the worker's device: its context (current on the main thread),
// kernels, two streams and a pinned staging area per stream.
type gpu struct {
	hello   wire.Hello
	ctx     cu.CUContext
	fn      map[string]cu.Function
	streams [2]cu.Stream
	stage   [2]*pinned // inputs then outputs of one step
}

func open(ordinal int) (*gpu, error) {
	dev, err := cu.GetDevice(ordinal)
	if err != nil {
		return nil, fmt.Errorf("device %d: %v", ordinal, err)
	}
	ctx, err := dev.MakeContext(cu.SchedBlockingSync)
	if err != nil {
		return nil, fmt.Errorf("device %d: context: %v", ordinal, err)
	}
	g := &gpu{ctx: ctx, fn: map[string]cu.Function{}}
	if g.hello, err = describe(dev, ordinal); err != nil {
		return nil, err
	}
	for _, name := range ptx.Modules {
		src, err := ptx.Load(name)
		if err != nil {
			return nil, err
		}
		mod, err := cu.LoadData(src)
		if err != nil {
			return nil, fmt.Errorf("loading %s.ptx: %v", name, err)
		}
		for _, k := range kernelsOf[name] {
			if g.fn[k], err = mod.Function(k); err != nil {
				return nil, fmt.Errorf("kernel %s in %s.ptx: %v", k, name, err)
			}
		}
	}
	for i := range g.streams {
		if g.streams[i], err = cu.MakeStream(cu.NonBlocking); err != nil {
			return nil, err
		}
		// a step's input and its float32 output (at most 8× the input)
		if g.stage[i], err = allocPinned(wire.MaxStep); err != nil {
			return nil, err
		}
	}
	return g, nil
}

var kernelsOf = map[string][]string{
	"dequant":     {"dequant_fp8", "dequant_nvfp4", "dequant_mxfp4"},
	"nvfp4_quant": {"nvfp4_max", "nvfp4_mse"},
	"w4a_fp8":     {"w4a_fp8"},

	// quant2.go
	"fp8_quant":     {"fp8q_amax", "fp8q_scales", "fp8q_encode"},
	"nvfp4_recipes": {"nvfp4_gptq", "nvfp4_hess_acc", "nvfp4_hessian"},

	// dequant_int.go
	"dequant_int": {"dequant_int", "stats_int", "stats_nvfp4", "stats_mxfp4", "stats_fp8"},
}

func (g *gpu) close() {
	for i := range g.streams {
		if g.stage[i] != nil {
			g.stage[i].free()
		}
		g.streams[i].Destroy()
	}
	g.ctx.Destroy()
}

// step is one piece of a request: inputs copied to the device, a launch,
// outputs copied back into the response's buffers.
type step struct {
	ins, outs [][]byte
	launch    func(in, out []cu.DevicePtr, s cu.Stream) error
}

// pipeline runs steps alternately on the two streams: while one stream's
// kernel runs, the other copies (pinned staging, async copies).
func (g *gpu) pipeline(steps []step) error {
	type slot struct {
		in      []cu.DevicePtr // device buffers: a step's inputs, then its outputs
		size    []int64
		pending *step // waiting for its outputs
	}
	var slots [2]slot
	defer func() {
		for k, s := range slots {
			g.streams[k].Synchronize() // nothing may still use the buffers
			for _, p := range s.in {
				cu.MemFree(p)
			}
		}
	}()
	finish := func(k int) error {
		s := &slots[k]
		if s.pending == nil {
			return nil
		}
		if err := g.streams[k].Synchronize(); err != nil {
			return err
		}
		off := 0
		for _, o := range s.pending.outs {
			off += copy(o, g.stage[k].bytes()[stageIn(s.pending)+off:])
		}
		s.pending = nil
		return nil
	}
	for i := range steps {
		st, k := &steps[i], i%2
		if err := finish(k); err != nil {
			return err
		}
		s := &slots[k]
		// device buffers, grown as needed: inputs then outputs
		bufs := append(append([][]byte{}, st.ins...), st.outs...)
		for len(s.size) < len(bufs) {
			s.size = append(s.size, 0)
			s.in = append(s.in, 0)
		}
		for j, b := range bufs {
			if need := max(int64(len(b)), 16); need > s.size[j] {
				if s.size[j] > 0 {
					cu.MemFree(s.in[j])
				}
				p, err := cu.MemAlloc(need)
				if err != nil {
					return fmt.Errorf("cuMemAlloc(%d): %v", need, err)
				}
				s.in[j], s.size[j] = p, need
			}
		}
		stage := g.stage[k].bytes()
		if stageIn(st)+stageOut(st) > len(stage) {
			return fmt.Errorf("step of %d bytes exceeds the staging buffer", stageIn(st)+stageOut(st))
		}
		off := 0
		for j, b := range st.ins {
			copy(stage[off:], b)
			if len(b) > 0 {
				if err := cu.MemcpyHtoDAsync(s.in[j], unsafe.Pointer(&stage[off]), int64(len(b)), g.streams[k]); err != nil {
					return err
				}
			}
			off += len(b)
		}
		devIn, devOut := s.in[:len(st.ins)], s.in[len(st.ins):len(bufs)]
		if err := st.launch(devIn, devOut, g.streams[k]); err != nil {
			return err
		}
		for j, o := range st.outs {
			if err := cu.MemcpyDtoHAsync(unsafe.Pointer(&stage[off]), devOut[j], int64(len(o)), g.streams[k]); err != nil {
				return err
			}
			off += len(o)
		}
		s.pending = st
	}
	if err := finish(len(steps) % 2); err != nil {
		return err
	}
	return finish((len(steps) + 1) % 2)
}

func stageIn(s *step) (n int) {
	for _, b := range s.ins {
		n += len(b)
	}
	return n
}

func stageOut(s *step) (n int) {
	for _, b := range s.outs {
		n += len(b)
	}
	return n
}

// launch runs kernel name on a grid-stride grid over n items (or the given
// grid), each argument passed as 8 bytes (cu copies every argument so):
// pointers and long longs as they are, a float as its bits in the low half.
func (g *gpu) launch(name string, s cu.Stream, gridX, gridY, block, shared int, args ...uint64) error {
	p := make([]unsafe.Pointer, len(args))
	for i := range args {
		p[i] = unsafe.Pointer(&args[i])
	}
	if err := g.fn[name].Launch(gridX, gridY, 1, block, 1, 1, shared, s, p); err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	return nil
}

func gridFor(n int64) int { return int(min(max((n+255)/256, 1), 1<<16)) }

func f32(v float32) uint64     { return uint64(math.Float32bits(v)) }
func dp(p cu.DevicePtr) uint64 { return uint64(p) }
func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// handle answers one checked request (wire.Check has validated sizes).
func (g *gpu) handle(req wire.Request, parts [][]byte) (wire.Response, [][]byte, error) {
	t0 := time.Now()
	var out [][]byte
	var steps []step
	switch req.Op {
	case wire.OpInfo:
		free, total, err := cu.MemInfo()
		return wire.Response{FreeMem: free, TotalMem: total}, nil, err

	case wire.OpDequantFP8:
		rows, cols, R := req.Rows, req.Cols, req.R
		scols := (cols + req.C - 1) / req.C
		y := make([]byte, 4*rows*cols)
		out = [][]byte{y}
		// steps of rows up to chunkBytes of codes, each with the whole scale grid
		per := max(chunkBytes/cols, 1)
		for lo := int64(0); lo < rows; lo += per {
			hi := min(lo+per, rows)
			n := hi - lo
			steps = append(steps, step{
				ins:  [][]byte{parts[0][lo*cols : hi*cols], parts[1]},
				outs: [][]byte{y[4*lo*cols : 4*hi*cols]},
				launch: func(in, o []cu.DevicePtr, s cu.Stream) error {
					return g.launch("dequant_fp8", s, gridFor(n*cols), 1, 256, 0, dp(o[0]), dp(in[0]), dp(in[1]),
						uint64(lo), uint64(n), uint64(cols), uint64(R), uint64(req.C), uint64(scols), b2u(req.Inv), b2u(req.E5M2))
				},
			})
		}

	case wire.OpDequantNVFP4, wire.OpDequantMXFP4:
		block := int64(16)
		if req.Op == wire.OpDequantMXFP4 {
			block = 32
		}
		n := 2 * int64(len(parts[0]))
		y := make([]byte, 4*n)
		out = [][]byte{y}
		per := int64(chunkBytes) / (block / 2) * block // values a step
		for lo := int64(0); lo < n; lo += per {
			hi := min(lo+per, n)
			m := hi - lo
			steps = append(steps, step{
				ins:  [][]byte{parts[0][lo/2 : hi/2], parts[1][lo/block : hi/block]},
				outs: [][]byte{y[4*lo : 4*hi]},
				launch: func(in, o []cu.DevicePtr, s cu.Stream) error {
					if req.Op == wire.OpDequantMXFP4 {
						return g.launch("dequant_mxfp4", s, gridFor(m/2), 1, 256, 0, dp(o[0]), dp(in[0]), dp(in[1]), uint64(m))
					}
					return g.launch("dequant_nvfp4", s, gridFor(m/2), 1, 256, 0, dp(o[0]), dp(in[0]), dp(in[1]), uint64(m), f32(req.Global))
				},
			})
		}

	case wire.OpQuantNVFP4:
		kernel := "nvfp4_max"
		if req.Recipe == "mse" {
			kernel = "nvfp4_mse"
		}
		out, steps = nvfp4Steps(req, parts[0], func(m int64, in, o []cu.DevicePtr, s cu.Stream) error {
			return g.launch(kernel, s, gridFor(m), 1, 256, 0, dp(in[0]), dp(o[0]), dp(o[1]), uint64(m), f32(req.Global), f32(6*req.Global))
		})

	case wire.OpDequantInt, wire.OpStats:
		return g.handleInt(req, parts)
	case wire.OpW4AFP8:
		T, K, N := req.T, req.K, req.N
		y := make([]byte, 4*T*N)
		out = [][]byte{y}
		// one step: the weight is read by every token
		steps = []step{{
			ins:  parts,
			outs: [][]byte{y},
			launch: func(in, o []cu.DevicePtr, s cu.Stream) error {
				return g.launch("w4a_fp8", s, int((N+127)/128), int(T), 128, int(K), dp(o[0]), dp(in[0]), dp(in[1]), dp(in[2]), dp(in[3]), uint64(T), uint64(K), uint64(N))
			},
		}}
	case wire.OpQuantFP8, wire.OpQuantNVFP4GPTQ, wire.OpQuantNVFP4LH:
		out, steps = g.quant2(req, parts)
	case wire.OpW4ANVFP4, wire.OpW4AFP8TC, wire.OpW4ANVFP4TC, wire.OpRMSNorm, wire.OpRoPE, wire.OpAttention, wire.OpSwiGLU, wire.OpChannelStats, wire.OpBlockHessians, wire.OpAbsHist:
		steps, out = g.forwardSteps(req, parts) // forward.go
	default:
		return wire.Response{}, nil, fmt.Errorf("unknown operation %q", req.Op)
	}
	if err := g.pipeline(steps); err != nil {
		// A CUDA error can leave the context unusable: exit, so that the
		// client finishes this job on the CPU and starts a new worker.
		fmt.Fprintf(os.Stderr, "quantscope-cuda-worker: %s: %v\n", req.Op, err)
		os.Exit(3)
	}
	return wire.Response{Millis: float64(time.Since(t0).Microseconds()) / 1000}, out, nil
}
