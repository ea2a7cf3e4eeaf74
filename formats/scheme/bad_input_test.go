package scheme

import (
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/synth"
)

// Hostile headers: each must end in an error or a finding that names the
// tensor and the rule, never a panic, a hang or an allocation sized by a
// header's claim rather than by the bytes stored.

// withTensor returns ts with the tensor of w's name replaced by w, or w
// added when ts has none of that name.
func withTensor(ts []safetensors.WriteTensor, w safetensors.WriteTensor) []safetensors.WriteTensor {
	out := slices.Clone(ts)
	for i := range out {
		if out[i].Name == w.Name {
			out[i] = w
			return out
		}
	}
	return append(out, w)
}

func leF32(x ...float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func leI64(x ...int64) []byte {
	b := make([]byte, 8*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
	return b
}

func leF16(x ...float32) []byte {
	b := make([]byte, 2*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint16(b[2*i:], numeric.Float32ToF16(v))
	}
	return b
}

// findingOf is the finding of a rule on a tensor, or nil.
func findingOf(fs []Finding, rule, tensor string) *Finding {
	for i := range fs {
		if fs[i].Rule == rule && fs[i].Tensor == tensor {
			return &fs[i]
		}
	}
	return nil
}

// wantErr fails unless err names the module, the tensor and the rule.
func wantErr(t *testing.T, what string, err error, module, tensor, rule string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	for _, s := range []string{`module "` + module + `"`, `tensor "` + tensor + `"`, "rule " + rule} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("%s: error %q does not say %s", what, err, s)
		}
	}
}

// An FP8 weight with a zero-sized dimension and a 2-D scale derives a block
// of 0 values: the rules report the scale, not divide by zero (the loader's
// goroutine took the whole process down).
func TestFP8ZeroSizedWeight(t *testing.T) {
	for _, shape := range [][]uint64{{256, 0}, {0, 256}} {
		mem := newMem(t, []safetensors.WriteTensor{
			{Name: "l.weight", DType: safetensors.F8_E4M3, Shape: shape},
			{Name: "l.weight_scale_inv", DType: safetensors.F32, Shape: []uint64{2, 3}, Data: make([]byte, 24)},
		})
		mods := Group(mem.infos(), nil, nil)
		if len(mods) != 1 || mods[0].Layout != LayoutFP8Block {
			t.Fatalf("%v: modules %+v", shape, mods)
		}
		fs := CheckModules(mods, &Scheme{})
		f := findingOf(fs, "scale-shape", "l.weight_scale_inv")
		if f == nil || f.Severity != SeverityError || f.Module != "l" {
			t.Fatalf("%v: findings %+v, want a scale-shape error on l.weight_scale_inv", shape, fs)
		}
		_, err := OpenRows(mods[0], mem)
		wantErr(t, "open", err, "l", "l.weight_scale_inv", "scale-shape")
	}
}

// gptqWithGIdx is a GPTQ module of 16 outputs × 256 inputs (two groups)
// whose g_idx is replaced by g.
func gptqWithGIdx(t *testing.T, g safetensors.WriteTensor) (*Module, *memFile) {
	t.Helper()
	mem := newMem(t, withTensor(synth.GPTQ("m", weights(3, 16, 256), 4, 128), g))
	return Group(mem.infos(), &Scheme{Method: "gptq", Bits: 4, GroupSize: 128, CheckpointFormat: "gptq"}, nil)[0], mem
}

// gIdxF32 is a float g_idx of 256 entries, i/128, with entry 7 set to bad.
func gIdxF32(name string, dt safetensors.DType, bad float32) safetensors.WriteTensor {
	v := make([]float32, 256)
	for i := range v {
		v[i] = float32(i / 128)
	}
	v[7] = bad
	if dt == safetensors.F16 {
		return safetensors.WriteTensor{Name: name, DType: dt, Shape: []uint64{256}, Data: leF16(v...)}
	}
	return safetensors.WriteTensor{Name: name, DType: dt, Shape: []uint64{256}, Data: leF32(v...)}
}

func gIdxI64(name string, bad int64) safetensors.WriteTensor {
	v := make([]int64, 256)
	for i := range v {
		v[i] = int64(i / 128)
	}
	v[7] = bad
	return safetensors.WriteTensor{Name: name, DType: safetensors.I64, Shape: []uint64{256}, Data: leI64(v...)}
}

// A g_idx entry that is no group (infinite, NaN, negative, or past any int)
// is refused by Dequantize, OpenRows and Packed alike, naming g_idx and the
// entry; float→int conversion once made the largest ones MinInt64, an index
// that passed the ">= groups" test.
func TestBadGIdx(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for name, g := range map[string]safetensors.WriteTensor{
		"f32 +inf": gIdxF32("m.g_idx", safetensors.F32, inf),
		"f32 -inf": gIdxF32("m.g_idx", safetensors.F32, -inf),
		"f32 nan":  gIdxF32("m.g_idx", safetensors.F32, nan),
		"f32 1e20": gIdxF32("m.g_idx", safetensors.F32, 1e20),
		"f32 -1":   gIdxF32("m.g_idx", safetensors.F32, -1),
		"f32 0.5":  gIdxF32("m.g_idx", safetensors.F32, 0.5),
		"f16 +inf": gIdxF32("m.g_idx", safetensors.F16, inf),
		"f16 2":    gIdxF32("m.g_idx", safetensors.F16, 2),
		"i64 max":  gIdxI64("m.g_idx", math.MaxInt64),
		"i64 min":  gIdxI64("m.g_idx", math.MinInt64),
		"i64 2^32": gIdxI64("m.g_idx", 1<<32),
		"i64 2":    gIdxI64("m.g_idx", 2),
	} {
		m, mem := gptqWithGIdx(t, g)
		_, err := Dequantize(m, mem, 0, 16)
		wantErr(t, name+": dequantize", err, "m", "m.g_idx", "g_idx")
		if !strings.Contains(err.Error(), "entry 7 ") {
			t.Fatalf("%s: error %q does not name entry 7", name, err)
		}
		_, err = OpenRows(m, mem)
		wantErr(t, name+": open", err, "m", "m.g_idx", "g_idx")
		s := &RowStream{m: m, r: mem, rows: 16, cols: 256} // Packed on its own
		_, err = s.Packed()
		wantErr(t, name+": packed", err, "m", "m.g_idx", "g_idx")
	}
	// compressed-tensors' weight_g_idx goes through the same check.
	ct := &Scheme{Method: "compressed-tensors", Groups: []ConfigGroup{{Targets: []string{"Linear"}, Weights: &QuantArgs{NumBits: 4, Type: "int", GroupSize: 128}}}}
	ts := withTensor(synth.CTPack("m", weights(4, 8, 256), 4, 128, true, packing.CTBitstream), gIdxF32("m.weight_g_idx", safetensors.F32, inf))
	mem := newMem(t, ts)
	m := Group(mem.infos(), ct, nil)[0]
	_, err := Dequantize(m, mem, 0, 8)
	wantErr(t, "ct +inf", err, "m", "m.weight_g_idx", "g_idx")
}

// Good g_idx in any integer or float dtype decodes to the same values.
func TestGIdxDTypes(t *testing.T) {
	m, mem := gptqWithGIdx(t, gIdxI64("m.g_idx", 0))
	want, err := Dequantize(m, mem, 0, 16)
	if err != nil {
		t.Fatal(err)
	}
	for name, g := range map[string]safetensors.WriteTensor{
		"f32": gIdxF32("m.g_idx", safetensors.F32, 0),
		"f16": gIdxF32("m.g_idx", safetensors.F16, 0),
	} {
		m, mem := gptqWithGIdx(t, g)
		got, err := Dequantize(m, mem, 0, 16)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s: values differ from the I64 g_idx's (%v)", name, err)
		}
	}
}

// A sub-byte scale dtype (F4) takes half a byte a scale: read as one byte a
// scale it indexed an empty slice, ran past the decoder's buffer, or used
// another row's scales. It is refused, naming the scale tensor.
func TestSubByteScaleDType(t *testing.T) {
	// compressed-tensors pack-quantized, weight_scale F4 [2, 2].
	ct := &Scheme{Method: "compressed-tensors", Groups: []ConfigGroup{{Targets: []string{"Linear"}, Weights: &QuantArgs{NumBits: 4, Type: "int", GroupSize: 128}}}}
	ts := withTensor(synth.CTPack("m", weights(5, 2, 256), 4, 128, true, packing.CTBitstream),
		safetensors.WriteTensor{Name: "m.weight_scale", DType: safetensors.F4, Shape: []uint64{2, 2}, Data: []byte{0x22, 0x22}})
	mem := newMem(t, ts)
	m := Group(mem.infos(), ct, func(string) ([]int64, bool) { return []int64{2, 256}, true })[0]
	_, err := Dequantize(m, mem, 0, 2)
	wantErr(t, "ct dequantize", err, "m", "m.weight_scale", "scale-dtype")
	_, err = (&RowStream{m: m, r: mem, rows: 2, cols: 256}).Packed()
	wantErr(t, "ct packed", err, "m", "m.weight_scale", "scale-dtype")
	if f := findingOf(CheckModules([]*Module{m}, ct), "scale-dtype", "m.weight_scale"); f == nil || f.Severity != SeverityError {
		t.Fatalf("ct: no scale-dtype finding on m.weight_scale")
	}

	// FP8 [4, 64] with weight_scale F4 [4, 2] (two groups of 32 a row).
	mem = newMem(t, []safetensors.WriteTensor{
		{Name: "m.weight", DType: safetensors.F8_E4M3, Shape: []uint64{4, 64}, Data: make([]byte, 256)},
		{Name: "m.weight_scale", DType: safetensors.F4, Shape: []uint64{4, 2}, Data: []byte{0x22, 0x44, 0x22, 0x44}},
	})
	fp8 := &Scheme{Method: "fp8", Family: FamilyFP8}
	m = Group(mem.infos(), fp8, nil)[0]
	_, err = OpenRows(m, mem)
	wantErr(t, "fp8 open", err, "m", "m.weight_scale", "scale-dtype")
	_, err = Dequantize(m, mem, 1, 2)
	wantErr(t, "fp8 dequantize", err, "m", "m.weight_scale", "scale-dtype")
	_, err = SampleRows(m, mem, 1, 2, 0, 64)
	wantErr(t, "fp8 sample", err, "m", "m.weight_scale", "scale-dtype")
	if f := findingOf(CheckModules([]*Module{m}, fp8), "scale-dtype", "m.weight_scale"); f == nil || f.Severity != SeverityError {
		t.Fatalf("fp8: no scale-dtype finding on m.weight_scale")
	}
}

// weight_shape values whose product or width no packed row can hold (4 ×
// (2^62+1) wrapped to 4 parameters, and the unpacker ran off its slice) are
// set aside: the shape is inferred from the packed width, a CT-004 error
// names weight_shape, and the module decodes as its stored bytes say.
func TestCTImpossibleWeightShape(t *testing.T) {
	ct := &Scheme{Method: "compressed-tensors", Groups: []ConfigGroup{{Targets: []string{"Linear"}, Weights: &QuantArgs{NumBits: 4, Type: "int", GroupSize: 8}}}}
	w := weights(6, 4, 8)
	ts := withTensor(synth.CTPack("m", w, 4, 8, true, packing.CTBitstream),
		safetensors.WriteTensor{Name: "m.weight_scale", DType: safetensors.F32, Shape: []uint64{4, 1}, Data: leF32(0.01, 0.02, 0.03, 0.04)})
	mem := newMem(t, ts)
	good := Group(mem.infos(), ct, func(string) ([]int64, bool) { return []int64{4, 8}, true })[0]
	want, err := Dequantize(good, mem, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]int64{{4, 1<<62 + 1}, {1 << 62, 8}, {4, 9}, {1 << 33, 1 << 33}} {
		m := Group(mem.infos(), ct, func(string) ([]int64, bool) { return bad, true })[0]
		if !slices.Equal(m.WeightShape, []uint64{4, 8}) || m.Parameters != 32 {
			t.Fatalf("%v: shape %v, %d parameters; want the packed width's [4 8], 32", bad, m.WeightShape, m.Parameters)
		}
		f := findingOf(CheckModules([]*Module{m}, ct), "CT-004", "m.weight_shape")
		if f == nil || f.Severity != SeverityError || !strings.Contains(f.Message, "weight_shape") {
			t.Fatalf("%v: no CT-004 error on m.weight_shape: %+v", bad, f)
		}
		got, err := Dequantize(m, mem, 0, 4)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%v: values differ from the stored ones (%v)", bad, err)
		}
	}
}

// A row count times a width of 2^64 wrapped to 0 values, under the limit.
func TestDequantizeLimitOverflow(t *testing.T) {
	ts := []TensorInfo{{Name: "m.weight", DType: safetensors.F32, Shape: []uint64{1 << 34, 1 << 30}, NBytes: 64}}
	m := Group(ts, nil, nil)[0]
	_, err := Dequantize(m, nil, 0, 1<<34)
	wantErr(t, "2^64 values", err, "m", "m.weight", "rows")
}

// allocated is the bytes f allocates.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// A GPTQ weight with no outputs holds no bytes whatever width it claims: a
// 200-byte shard claiming 2^47 inputs asked for terabytes. A width past
// the limit of one call is refused; a smaller one decodes to nothing
// without buffers sized by the width.
func TestEmptyWeightWideRows(t *testing.T) {
	gptq := &Scheme{Method: "gptq", Bits: 4, GroupSize: 128, CheckpointFormat: "gptq"}
	open := func(qrows uint64) (*Module, *memFile) {
		mem := newMem(t, []safetensors.WriteTensor{
			{Name: "m.qweight", DType: safetensors.I32, Shape: []uint64{qrows, 0}},
			{Name: "m.scales", DType: safetensors.F16, Shape: []uint64{1, 0}},
		})
		return Group(mem.infos(), gptq, nil)[0], mem
	}
	m, mem := open(1 << 44)
	_, err := OpenRows(m, mem)
	wantErr(t, "open 2^47 inputs", err, "m", "m.qweight", "columns")
	_, err = Dequantize(m, mem, 0, 0)
	wantErr(t, "dequantize 2^47 inputs", err, "m", "m.qweight", "columns")

	m, mem = open(1 << 20) // 2^23 inputs, no outputs
	var v []float32
	var s *RowStream
	var p *Packed
	var err2 error
	n := allocated(func() {
		if s, err = OpenRows(m, mem); err == nil {
			p, err = s.Packed()
		}
		v, err2 = Dequantize(m, mem, 0, 0)
	})
	if err != nil || err2 != nil || len(v) != 0 || p != nil {
		t.Fatalf("empty weight: %v %v %d values, packed %v", err, err2, len(v), p)
	}
	if n > 1<<20 {
		t.Fatalf("an empty weight allocated %d bytes", n)
	}

	// No inputs and 2^40 outputs: no values, and no loop over the outputs.
	mem = newMem(t, []safetensors.WriteTensor{
		{Name: "m.qweight", DType: safetensors.I32, Shape: []uint64{0, 1 << 40}},
		{Name: "m.scales", DType: safetensors.F16, Shape: []uint64{1, 0}},
	})
	m = Group(mem.infos(), gptq, nil)[0]
	if v, err := Dequantize(m, mem, 0, 1<<40); err != nil || len(v) != 0 {
		t.Fatalf("no inputs: %d values, %v", len(v), err)
	}
	if smp, err := SampleRows(m, mem, 0, 5, 0, 0); err != nil || len(smp.Values) != 0 {
		t.Fatalf("no inputs, sample: %v", err)
	}
}

// An empty weight that claims 2^40 or 2^63 rows is refused by the stream
// with its module and rule (int(2^63) was negative: a makeslice panic; 2^40
// rows of nothing took half a minute); a modest empty weight opens.
func TestEmptyWeightTallRows(t *testing.T) {
	for _, rows := range []uint64{1 << 40, 1 << 63} {
		mem := newMem(t, []safetensors.WriteTensor{{Name: "m.weight", DType: safetensors.F32, Shape: []uint64{rows, 0}}})
		m := Group(mem.infos(), nil, nil)[0]
		_, err := OpenRows(m, mem)
		var de *DequantError
		if !errors.As(err, &de) || de.Module != "m" || de.Tensor != "m.weight" || de.Rule != "shape" {
			t.Errorf("%d × 0: %v", rows, err)
		}
	}
	mem := newMem(t, []safetensors.WriteTensor{{Name: "m.weight", DType: safetensors.F32, Shape: []uint64{1 << 20, 0}}})
	if _, err := OpenRows(Group(mem.infos(), nil, nil)[0], mem); err != nil {
		t.Errorf("2^20 × 0: %v", err)
	}
}

// loneFP8 is a lone file's 16×16 FP8 weight of 1.0 and a scalar scale of 2
// stored under scaleRole, grouped under the scheme md declares.
func loneFP8(t *testing.T, md map[string]string, scaleRole string) (*Module, *memFile, []Finding, error) {
	t.Helper()
	s, ok, err := FromFileMetadata(md)
	if err != nil || !ok {
		return nil, nil, nil, err
	}
	w := make([]byte, 16*16)
	for i := range w {
		w[i] = 0x38 // 1.0
	}
	mem := newMem(t, []safetensors.WriteTensor{
		{Name: "m.weight", DType: safetensors.F8_E4M3, Shape: []uint64{16, 16}, Data: w},
		{Name: "m." + scaleRole, DType: safetensors.F32, Shape: []uint64{}, Data: leF32(2)},
	})
	mods := Group(mem.infos(), s, nil)
	if len(mods) != 1 {
		t.Fatalf("modules %+v", mods)
	}
	return mods[0], mem, CheckModules(mods, s), nil
}

// quantscope.scale says which scale tensor the file holds: inverse and
// multiplier a weight_scale_inv (inverse only GPT-QModel's), direct a
// weight_scale. A mismatch is refused, never decoded the wrong way round.
func TestLoneScaleKindMismatch(t *testing.T) {
	md := func(naming, scale string) map[string]string {
		return map[string]string{MetaFormat: "fp8_e4m3", MetaNaming: naming, MetaScale: scale}
	}
	// What quantize writes, and DeepSeek's multiplier, still read.
	for _, c := range []struct {
		naming, scale, role string
		want                float32
	}{
		{NamingGPTQM, "inverse", "weight_scale_inv", 0.5},
		{NamingGPTQM, "multiplier", "weight_scale_inv", 2},
		{NamingModelOpt, "direct", "weight_scale", 2},
		{NamingCT, "direct", "weight_scale", 2},
	} {
		m, mem, fs, err := loneFP8(t, md(c.naming, c.scale), c.role)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		v, err := Dequantize(m, mem, 0, 1)
		if err != nil || v[0] != c.want || findingOf(fs, "scale-kind", "m."+c.role) != nil {
			t.Fatalf("%+v: %v %v %+v", c, v, err, fs)
		}
	}
	// inverse under a naming that is not GPT-QModel's: refused by the metadata.
	for _, naming := range []string{NamingModelOpt, NamingCT} {
		_, _, _, err := loneFP8(t, md(naming, "inverse"), "weight_scale")
		if err == nil || !strings.Contains(err.Error(), MetaScale) || !strings.Contains(err.Error(), `"inverse"`) {
			t.Fatalf("%s inverse: %v", naming, err)
		}
	}
	// A scale tensor the declared kind does not describe.
	for _, c := range []struct{ naming, scale, role string }{
		{NamingGPTQM, "inverse", "weight_scale"},
		{NamingGPTQM, "multiplier", "weight_scale"},
		{NamingModelOpt, "multiplier", "weight_scale"},
		{NamingGPTQM, "direct", "weight_scale_inv"},
		{NamingCT, "direct", "weight_scale_inv"},
	} {
		m, mem, fs, err := loneFP8(t, md(c.naming, c.scale), c.role)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		f := findingOf(fs, "scale-kind", "m."+c.role)
		if f == nil || f.Severity != SeverityError || !strings.Contains(f.Message, MetaScale) || !strings.Contains(f.Message, `"`+c.scale+`"`) {
			t.Fatalf("%+v: findings %+v", c, fs)
		}
		_, err = Dequantize(m, mem, 0, 1)
		wantErr(t, "dequantize", err, "m", "m."+c.role, "scale-kind")
		if !strings.Contains(err.Error(), MetaScale) || !strings.Contains(err.Error(), `"`+c.scale+`"`) {
			t.Fatalf("%+v: %v", c, err)
		}
		_, err = OpenRows(m, mem)
		wantErr(t, "open", err, "m", "m."+c.role, "scale-kind")
	}
}

// A block size past 2^31 is refused where it is read, and the scale grid's
// ceiling does not overflow on one that reaches it anyway.
func TestHugeFP8Block(t *testing.T) {
	_, _, err := FromFileMetadata(map[string]string{MetaFormat: "fp8_e4m3", MetaNaming: NamingModelOpt, MetaScale: "direct", MetaBlock: "9223372036854775807,1"})
	if err == nil || !strings.Contains(err.Error(), MetaBlock) {
		t.Fatalf("metadata: %v", err)
	}
	_, _, err = FromFileMetadata(map[string]string{MetaFormat: "fp8_e4m3", MetaNaming: NamingModelOpt, MetaScale: "direct", MetaBlock: "1,2147483649"})
	if err == nil || !strings.Contains(err.Error(), MetaBlock) {
		t.Fatalf("metadata: %v", err)
	}
	_, err = Detect([]byte(`{"quantization_config":{"quant_method":"fp8","weight_block_size":[9223372036854775807,1]}}`), nil)
	if err == nil || !strings.Contains(err.Error(), "weight_block_size") {
		t.Fatalf("config: %v", err)
	}
	w := make([]byte, 16*16)
	mem := newMem(t, []safetensors.WriteTensor{
		{Name: "m.weight", DType: safetensors.F8_E4M3, Shape: []uint64{16, 16}, Data: w},
		{Name: "m.weight_scale", DType: safetensors.F32, Shape: []uint64{1, 16}, Data: make([]byte, 64)},
	})
	mods := Group(mem.infos(), &Scheme{Method: "fp8", Family: FamilyFP8, WeightBlockSize: []int{math.MaxInt, 1}}, nil)
	if len(mods) != 1 || mods[0].Layout != LayoutFP8Block {
		t.Fatalf("modules %+v", mods)
	}
	v, err := Dequantize(mods[0], mem, 0, 16)
	if err != nil || len(v) != 256 {
		t.Fatalf("decode: %d values, %v", len(v), err)
	}
}

// A crafted metadata value is quoted in part, not whole.
func TestLoneMetadataValueQuotedShort(t *testing.T) {
	huge := strings.Repeat("é", 1<<20)
	for key, md := range map[string]map[string]string{
		MetaFormat: {MetaFormat: huge},
		MetaNaming: {MetaFormat: "fp8_e4m3", MetaNaming: huge},
		MetaScale:  {MetaFormat: "fp8_e4m3", MetaNaming: NamingGPTQM, MetaScale: huge},
		MetaBlock:  {MetaFormat: "fp8_e4m3", MetaNaming: NamingGPTQM, MetaScale: "inverse", MetaBlock: huge},
	} {
		_, _, err := FromFileMetadata(md)
		if err == nil || len(err.Error()) > 300 || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "…") || !utf8.ValidString(err.Error()) {
			t.Fatalf("%s: %d-byte error", key, len(err.Error()))
		}
	}
	_, _, err := FromFileMetadata(map[string]string{MetaFormat: "int3"})
	if err == nil || !strings.Contains(err.Error(), `"int3"`) || strings.Contains(err.Error(), "…") {
		t.Fatalf("short value: %v", err)
	}
}
