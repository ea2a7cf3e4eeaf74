package scheme

import (
	"math"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/synth"
)

// memInto adds ReadTensorInto to memFile (the buffered path of the stream).
type memInto struct{ *memFile }

func (m memInto) ReadTensorInto(name string, dst []byte, off int64) error {
	b, err := m.ReadTensor(name, off, int64(len(dst)))
	copy(dst, b)
	return err
}

// The row stream gives Dequantize's values bit for bit, in bands of any
// height, for the layouts of its fused loops: FP8 with tensor, channel and
// partial 128×128 block scales (multiplied, and divided as GPT-QModel's
// inverse scales are), NVFP4, dense; and through Dequantize for GPTQ.
func TestRowStreamEqualsDequantize(t *testing.T) {
	w := weights(5, 200, 300) // 200×300: partial blocks in both directions
	w16 := weights(6, 40, 256)
	cases := []struct {
		name string
		ts   []safetensors.WriteTensor
		s    *Scheme
		kind streamKind
	}{
		{"fp8-tensor", synth.FP8Tensor("m", w, 1), &Scheme{Method: "fp8", Family: FamilyFP8}, streamFP8},
		{"fp8-channel", synth.FP8Channel("m", w), &Scheme{Method: "fp8", Family: FamilyFP8}, streamFP8},
		{"fp8-block", synth.FP8Block("m", w, 128), &Scheme{Method: "fp8", Family: FamilyFP8}, streamFP8},
		{"fp8-block-inverse", synth.FP8Block("m", w, 128), &Scheme{Method: "fp8", Family: FamilyFP8, InverseFP8Scales: true}, streamFP8},
		{"nvfp4", synth.NVFP4ModelOpt("m", w16, 2, safetensors.F32), &Scheme{Method: "modelopt", Family: FamilyNVFP4}, streamNVFP4},
		{"dense", synth.Dense("m.weight", w), nil, streamDense},
		{"gptq", synth.GPTQ("m", w16, 4, 128), &Scheme{Method: "gptq", Bits: 4, GroupSize: 128, CheckpointFormat: "gptq"}, streamGeneric},
		// compressed-tensors' MXFP8 stores its E8M0 exponents as uint8: read
		// as 2^(e−127), not as the integer e
		{"mxfp8-u8-scales", mxfp8U8("m", 40, 256), &Scheme{Method: "compressed-tensors", Family: FamilyMXFP8}, streamFP8},
	}
	// Each decoder is released, so that the next case decodes in the
	// buffers of the one before (of another format and size): with the
	// collector off the pool keeps them.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, c := range cases {
		mem := newMem(t, c.ts)
		m := Group(mem.infos(), c.s, nil)[0]
		rows, cols := m.Matrix2D()
		want, err := Dequantize(m, mem, 0, int(rows))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, r := range []TensorReader{mem, memInto{mem}} {
			s, err := OpenRows(m, r)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if s.kind != c.kind {
				t.Fatalf("%s: stream kind %d, want %d", c.name, s.kind, c.kind)
			}
			d := s.NewDecoder()
			got := make([]float32, len(want))
			var info BandInfo
			for lo := 0; lo < int(rows); lo += 7 {
				hi := min(lo+7, int(rows))
				if err := d.Decode(got[lo*int(cols):hi*int(cols)], lo, hi, &info); err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s (%T): value %d = %v, Dequantize %v", c.name, r, i, got[i], want[i])
				}
			}
			// Every scale is reported once, by the band of its first row.
			var nScales int
			for _, tn := range c.ts {
				if tn.Name == "m.weight_scale" || tn.Name == "m.weight_scale_inv" || tn.Name == "m.scales" {
					nScales = len(tn.Data) * 8 / int(tn.DType.Bits())
				}
			}
			if c.kind != streamDense && len(info.Scales) != nScales {
				t.Fatalf("%s: %d scales reported, the tensor holds %d", c.name, len(info.Scales), nScales)
			}
			d.Release()
		}
	}
}

// A released decoder's buffers serve the next decoder: a stream after the
// first allocates no band buffers (fresh pages are the dearest part of a
// short stream on a VM).
func TestRowDecoderReleaseReusesBuffers(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one P: the pool's slot cannot be missed
	mem := newMem(t, synth.NVFP4ModelOpt("m", weights(8, 64, 1024), 2, safetensors.F32))
	m := Group(mem.infos(), &Scheme{Method: "modelopt", Family: FamilyNVFP4}, nil)[0]
	s, err := OpenRows(m, memInto{mem})
	if err != nil {
		t.Fatal(err)
	}
	band := make([]float32, 64*1024)
	stream := func() {
		d := s.NewDecoder()
		if err := d.Decode(band, 0, 64, nil); err != nil {
			t.Fatal(err)
		}
		d.Release()
	}
	stream() // fills the pool
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		stream()
	}
	runtime.ReadMemStats(&after)
	// The band's stored bytes alone are 32 KiB (codes) + 4 KiB (scales) +
	// 16 KiB (decoded scales); what is left is the decoder and the pool's
	// small holder. (memInto reads through memFile, which returns a slice
	// of the file, not a copy.)
	perStream := (after.TotalAlloc - before.TotalAlloc) / 10
	if limit := uint64(2048); perStream > limit {
		t.Fatalf("a stream allocated %d bytes, want at most %d (its buffers not reused)", perStream, limit)
	}
}

func TestRowStreamErrors(t *testing.T) {
	mem := newMem(t, synth.NVFP4ModelOpt("m", weights(7, 8, 64), 2, safetensors.F32))
	m := Group(mem.infos(), &Scheme{Method: "modelopt", Family: FamilyNVFP4}, nil)[0]
	s, err := OpenRows(m, mem)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.NewDecoder().Decode(make([]float32, 64), 7, 9, nil); err == nil {
		t.Fatal("rows past the end accepted")
	}
	if err := s.NewDecoder().Decode(make([]float32, 10), 0, 1, nil); err == nil {
		t.Fatal("a buffer too small accepted")
	}
	// A scale tensor of the wrong shape is refused when the stream opens,
	// naming the module, the tensor and the rule.
	ts := synth.NVFP4ModelOpt("m", weights(7, 8, 64), 2, safetensors.F32)
	for i := range ts {
		if ts[i].Name == "m.weight_scale" {
			ts[i].Shape, ts[i].Data = []uint64{8, 2}, ts[i].Data[:16]
		}
	}
	mem = newMem(t, ts)
	m = Group(mem.infos(), &Scheme{Method: "modelopt", Family: FamilyNVFP4}, nil)[0]
	if _, err := OpenRows(m, mem); err == nil || !strings.Contains(err.Error(), `"m"`) || !strings.Contains(err.Error(), "m.weight_scale") || !strings.Contains(err.Error(), "scale-shape") {
		t.Fatalf("bad scale shape: %v", err)
	}
}

// mxfp8U8 is an MXFP8 weight [rows, cols] (E4M3 codes, every code in turn)
// with its block-32 scales as compressed-tensors writes them: uint8
// exponents, 2^(e−127), here 120..134.
func mxfp8U8(name string, rows, cols int) []safetensors.WriteTensor {
	codes := make([]byte, rows*cols)
	for i := range codes {
		codes[i] = byte(i*7)&^0x7F | byte(i%0x7F) // no 0x7F/0xFF (NaN)
	}
	scales := make([]byte, rows*cols/32)
	for i := range scales {
		scales[i] = byte(120 + i%15)
	}
	return []safetensors.WriteTensor{
		{Name: name + ".weight", DType: safetensors.F8_E4M3, Shape: []uint64{uint64(rows), uint64(cols)}, Data: codes},
		{Name: name + ".weight_scale", DType: safetensors.U8, Shape: []uint64{uint64(rows), uint64(cols / 32)}, Data: scales},
	}
}
