package scheme

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/synth"
)

// memFile serves tensors from one in-memory safetensors file.
type memFile struct {
	h    *safetensors.Header
	data []byte
}

func newMem(t *testing.T, ts []safetensors.WriteTensor) *memFile {
	t.Helper()
	b, err := safetensors.Encode(ts, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := safetensors.Parse("mem.safetensors", b)
	if err != nil {
		t.Fatal(err)
	}
	return &memFile{h: h, data: b}
}

func (m *memFile) infos() []TensorInfo {
	var out []TensorInfo
	for _, t := range m.h.Tensors {
		out = append(out, TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape, NBytes: t.NBytes()})
	}
	return out
}

func (m *memFile) ReadTensor(name string, off, n int64) ([]byte, error) {
	t, ok := m.h.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("no tensor %q", name)
	}
	if off < 0 || uint64(off+n) > t.NBytes() {
		return nil, fmt.Errorf("tensor %q: read outside", name)
	}
	s := m.h.DataStart() + int64(t.Begin) + off
	return m.data[s : s+n], nil
}

func weights(seed uint64, rows, cols int) synth.Matrix {
	r := rand.New(rand.NewPCG(seed, 1))
	d := make([]float32, rows*cols)
	for i := range d {
		d[i] = float32(r.NormFloat64()) * 0.02
	}
	return synth.Matrix{Shape: []uint64{uint64(rows), uint64(cols)}, Data: d}
}

func TestSplitName(t *testing.T) {
	for name, want := range map[string][2]string{
		"model.layers.0.mlp.down_proj.weight":                 {"model.layers.0.mlp.down_proj", "weight"},
		"model.layers.0.mlp.down_proj.weight_scale_2":         {"model.layers.0.mlp.down_proj", "weight_scale_2"},
		"model.layers.0.mlp.down_proj.weight_scale":           {"model.layers.0.mlp.down_proj", "weight_scale"},
		"model.layers.0.self_attn.q_proj.weight_packed":       {"model.layers.0.self_attn.q_proj", "weight_packed"},
		"model.layers.0.self_attn.q_proj.weight_global_scale": {"model.layers.0.self_attn.q_proj", "weight_global_scale"},
		"model.layers.0.self_attn.q_proj.weight_scale_inv":    {"model.layers.0.self_attn.q_proj", "weight_scale_inv"},
		"model.layers.0.self_attn.k_proj.k_scale":             {"model.layers.0.self_attn.k_proj", "k_scale"},
		"model.layers.0.self_attn.q_proj.qweight":             {"model.layers.0.self_attn.q_proj", "qweight"},
		"model.layers.0.self_attn.q_proj.scales":              {"model.layers.0.self_attn.q_proj", "scales"},
		"model.layers.0.mlp.experts.gate_up_proj_blocks":      {"model.layers.0.mlp.experts.gate_up_proj", "blocks"},
		"model.layers.0.mlp.experts.gate_up_proj_scales":      {"model.layers.0.mlp.experts.gate_up_proj", "mx_scales"},
		"model.layers.0.self_attn.sinks":                      {"model.layers.0.self_attn.sinks", "tensor"},
		"weight":                                              {"weight", "tensor"},
	} {
		m, r := SplitName(name)
		if m != want[0] || r != want[1] {
			t.Errorf("%s -> %s %s, want %v", name, m, r, want)
		}
	}
}

// CT-005: the renaming view turns a ModelOpt NVFP4 module into a
// compressed-tensors one that dequantizes to the same values, with the same
// packed bytes and inverted global scales.
func TestModelOptToCTView(t *testing.T) {
	w := weights(1, 32, 64)
	mem := newMem(t, synth.NVFP4ModelOpt("layer", w, 3, safetensors.F32))
	mo := &Scheme{Method: "modelopt", Family: FamilyNVFP4}
	mods := Group(mem.infos(), mo, nil)
	if len(mods) != 1 || mods[0].Layout != LayoutModelOpt {
		t.Fatalf("modules %+v", mods)
	}
	want, err := Dequantize(mods[0], mem, 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	renames := ModelOptToCT(mods)
	if len(renames) != 3 {
		t.Fatalf("renames %+v", renames)
	}
	view := NewRenamedView(mem.infos(), mem, renames)
	names := []string{}
	for _, ti := range view.Tensors {
		names = append(names, ti.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"layer.input_global_scale", "layer.weight_global_scale", "layer.weight_packed", "layer.weight_scale"}) {
		t.Fatalf("names %v", names)
	}
	orig, _ := mem.ReadTensor("layer.weight", 0, 32*32)
	packed, _ := view.ReadTensor("layer.weight_packed", 0, 32*32)
	if !slices.Equal(orig, packed) {
		t.Fatal("weight_packed bytes differ from weight: the conversion must not swap nibbles")
	}
	ct := &Scheme{Method: "compressed-tensors", Family: FamilyNVFP4, Format: "nvfp4-pack-quantized"}
	cmods := Group(view.Tensors, ct, nil)
	if len(cmods) != 1 || cmods[0].Layout != LayoutCT || cmods[0].Format != FormatNVFP4 {
		t.Fatalf("converted module %+v", cmods[0])
	}
	got, err := Dequantize(cmods[0], view, 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > 1e-6*math.Abs(float64(want[i]))+1e-12 {
			t.Fatalf("value %d: %v vs %v", i, got[i], want[i])
		}
	}
	s2, _ := mem.ReadTensor("layer.weight_scale_2", 0, 4)
	gs, _ := view.ReadTensor("layer.weight_global_scale", 0, 4)
	a := math.Float32frombits(uint32(s2[0]) | uint32(s2[1])<<8 | uint32(s2[2])<<16 | uint32(s2[3])<<24)
	b := math.Float32frombits(uint32(gs[0]) | uint32(gs[1])<<8 | uint32(gs[2])<<16 | uint32(gs[3])<<24)
	if math.Abs(float64(a*b)-1) > 1e-6 {
		t.Fatalf("weight_global_scale %v is not 1/weight_scale_2 %v", b, a)
	}
	if len(CheckModules(cmods, ct)) != 0 {
		t.Fatalf("converted module has findings: %v", CheckModules(cmods, ct))
	}
}

func rules(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Rule)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func TestCTRulesAsFindings(t *testing.T) {
	w := weights(2, 8, 256)
	ct17 := &Scheme{Method: "compressed-tensors", Family: FamilyInt, Version: "0.17.1",
		Groups: []ConfigGroup{{Targets: []string{"Linear"}, Weights: &QuantArgs{NumBits: 3, Type: "int", GroupSize: 128, Strategy: "group"}}}}
	ct18 := *ct17
	ct18.Version = "0.18.0"
	perWord := newMem(t, synth.CTPack("m", w, 3, 128, true, packing.CTPerWord))
	bitstream := newMem(t, synth.CTPack("m", w, 3, 128, true, packing.CTBitstream))

	// The right version reads clean and decodes; the wrong one is CT-003.
	for _, c := range []struct {
		mem   *memFile
		s     *Scheme
		rules []string
	}{
		{perWord, ct17, nil}, {bitstream, &ct18, nil}, {perWord, &ct18, []string{"CT-003"}}, {bitstream, ct17, []string{"CT-003"}},
	} {
		shapes := func(name string) ([]int64, bool) { return []int64{8, 256}, true }
		mods := Group(c.mem.infos(), c.s, shapes)
		got := rules(CheckModules(mods, c.s))
		if !slices.Equal(got, c.rules) {
			t.Errorf("version %s: rules %v, want %v", c.s.Version, got, c.rules)
		}
		_, err := Dequantize(mods[0], c.mem, 0, 8)
		if (err == nil) != (c.rules == nil) {
			t.Errorf("version %s: dequantize error %v", c.s.Version, err)
		}
	}

	// CT-004: no weight_shape; shape inferred without reading it.
	ts := synth.CTPack("m", w, 4, 128, true, packing.CTBitstream)
	noShape := newMem(t, slices.DeleteFunc(slices.Clone(ts), func(x safetensors.WriteTensor) bool { return x.Name == "m.weight_shape" }))
	ct4 := &Scheme{Method: "compressed-tensors", Family: FamilyInt, Groups: []ConfigGroup{{Targets: []string{"Linear"}, Weights: &QuantArgs{NumBits: 4, Type: "int", GroupSize: 128}}}}
	mods := Group(noShape.infos(), ct4, nil)
	if got := rules(CheckModules(mods, ct4)); !slices.Equal(got, []string{"CT-004"}) {
		t.Errorf("missing weight_shape: %v", got)
	}
	if !slices.Equal(mods[0].WeightShape, []uint64{8, 256}) {
		t.Errorf("inferred shape %v", mods[0].WeightShape)
	}
	withShape := newMem(t, ts)
	mods = Group(withShape.infos(), ct4, nil) // values not read: an info note
	fs := CheckModules(mods, ct4)
	if len(fs) != 1 || fs[0].Rule != "CT-004" || fs[0].Severity != SeverityInfo || !mods[0].ShapeInferred {
		t.Errorf("unread weight_shape: %+v", fs)
	}
	// weight_shape whose width the packed words cannot hold.
	mods = Group(withShape.infos(), ct4, func(string) ([]int64, bool) { return []int64{8, 300}, true })
	if got := rules(CheckModules(mods, ct4)); !slices.Contains(got, "CT-004") {
		t.Errorf("impossible width: %v", got)
	}
	// CT-001 from a module whose group says 9 bits.
	ct9 := &Scheme{Method: "compressed-tensors", Groups: []ConfigGroup{{Targets: []string{"Linear"}, Weights: &QuantArgs{NumBits: 9, Type: "int"}}}}
	mods = Group(withShape.infos(), ct9, nil)
	if got := rules(CheckModules(mods, ct9)); !slices.Equal(got, []string{"CT-001"}) {
		t.Errorf("9 bits: %v", got)
	}
	// CT-002: a pack-quantized weight that is not I32 words.
	bad := []TensorInfo{{Name: "m.weight_packed", DType: safetensors.I16, Shape: []uint64{8, 64}, NBytes: 1024},
		{Name: "m.weight_scale", DType: safetensors.BF16, Shape: []uint64{8, 2}, NBytes: 32}, {Name: "m.weight_shape", DType: safetensors.I64, Shape: []uint64{2}, NBytes: 16}}
	mods = Group(bad, ct4, func(string) ([]int64, bool) { return []int64{8, 256}, true })
	if got := rules(CheckModules(mods, ct4)); !slices.Contains(got, "CT-002") {
		t.Errorf("I16 carrier: %v", got)
	}
	// CT-005: ModelOpt and compressed-tensors names mixed in one module.
	mixed := []TensorInfo{{Name: "m.weight_packed", DType: safetensors.U8, Shape: []uint64{8, 128}, NBytes: 1024},
		{Name: "m.weight_scale", DType: safetensors.F8_E4M3, Shape: []uint64{8, 16}, NBytes: 128},
		{Name: "m.weight_scale_2", DType: safetensors.F32, Shape: []uint64{}, NBytes: 4}}
	mods = Group(mixed, &Scheme{Method: "compressed-tensors", Family: FamilyNVFP4}, nil)
	if got := rules(CheckModules(mods, &Scheme{})); !slices.Contains(got, "CT-005") {
		t.Errorf("mixed names: %v", got)
	}
}

func TestScaleRules(t *testing.T) {
	nv := &Scheme{Method: "modelopt", Family: FamilyNVFP4}
	for name, c := range map[string]struct {
		ts   []TensorInfo
		rule string
	}{
		"nvfp4 scale shape": {[]TensorInfo{{Name: "m.weight", DType: safetensors.U8, Shape: []uint64{8, 32}, NBytes: 256},
			{Name: "m.weight_scale", DType: safetensors.F8_E4M3, Shape: []uint64{8, 2}, NBytes: 16},
			{Name: "m.weight_scale_2", DType: safetensors.F32, Shape: []uint64{}, NBytes: 4}}, "scale-shape"},
		"nvfp4 no global": {[]TensorInfo{{Name: "m.weight", DType: safetensors.U8, Shape: []uint64{8, 32}, NBytes: 256},
			{Name: "m.weight_scale", DType: safetensors.F8_E4M3, Shape: []uint64{8, 4}, NBytes: 32}}, "scale-missing"},
		"nvfp4 scale dtype": {[]TensorInfo{{Name: "m.weight", DType: safetensors.U8, Shape: []uint64{8, 32}, NBytes: 256},
			{Name: "m.weight_scale", DType: safetensors.F16, Shape: []uint64{8, 4}, NBytes: 64},
			{Name: "m.weight_scale_2", DType: safetensors.F32, Shape: []uint64{}, NBytes: 4}}, "scale-dtype"},
		"fp8 no scale": {[]TensorInfo{{Name: "m.weight", DType: safetensors.F8_E4M3, Shape: []uint64{8, 32}, NBytes: 256}}, "scale-missing"},
		"fp8 block shape": {[]TensorInfo{{Name: "m.weight", DType: safetensors.F8_E4M3, Shape: []uint64{300, 256}, NBytes: 76800},
			{Name: "m.weight_scale_inv", DType: safetensors.F32, Shape: []uint64{2, 2}, NBytes: 16}}, "scale-shape"},
		"mxfp4 scales": {[]TensorInfo{{Name: "e.w_blocks", DType: safetensors.U8, Shape: []uint64{4, 2, 16}, NBytes: 128},
			{Name: "e.w_scales", DType: safetensors.U8, Shape: []uint64{4, 3}, NBytes: 12}}, "scale-shape"},
		"gptq no scales": {[]TensorInfo{{Name: "m.qweight", DType: safetensors.I32, Shape: []uint64{16, 8}, NBytes: 512}}, "scale-missing"},
	} {
		s := nv
		if name == "fp8 block shape" {
			s = &Scheme{Method: "fp8", Family: FamilyFP8, WeightBlockSize: []int{128, 128}}
		}
		mods := Group(c.ts, s, nil)
		if got := rules(CheckModules(mods, s)); !slices.Contains(got, c.rule) {
			t.Errorf("%s: rules %v, want %s", name, got, c.rule)
		}
	}
}

// GPT-QModel's own FP8 export stores inverse scales: w = q / scale_inv.
func TestInverseFP8Scales(t *testing.T) {
	ts := []safetensors.WriteTensor{
		{Name: "m.weight", DType: safetensors.F8_E4M3, Shape: []uint64{1, 2}, Data: []byte{0x38, 0x40}},         // 1, 2
		{Name: "m.weight_scale_inv", DType: safetensors.F32, Shape: []uint64{}, Data: []byte{0, 0, 0x80, 0x40}}, // 4
	}
	mem := newMem(t, ts)
	for _, c := range []struct {
		inv  bool
		want []float32
	}{{false, []float32{4, 8}}, {true, []float32{0.25, 0.5}}} {
		s := &Scheme{Method: "fp8", Family: FamilyFP8, InverseFP8Scales: c.inv}
		mods := Group(mem.infos(), s, nil)
		got, err := Dequantize(mods[0], mem, 0, 1)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("inverse=%v: %v %v", c.inv, got, err)
		}
	}
}

func TestDequantizeRejectsRows(t *testing.T) {
	mem := newMem(t, synth.Dense("m.weight", weights(3, 4, 8)))
	mods := Group(mem.infos(), nil, nil)
	for _, r := range [][2]int{{-1, 2}, {3, 2}, {0, 5}} {
		if _, err := Dequantize(mods[0], mem, r[0], r[1]); err == nil {
			t.Errorf("rows %v accepted", r)
		}
	}
}

// A sample's codes account for every stored value of its rows, and the
// scales it lists are the ones of those rows.
func TestSampleRows(t *testing.T) {
	w := weights(9, 16, 256)
	cases := []struct {
		name   string
		ts     []safetensors.WriteTensor
		s      *Scheme
		kind   string
		scales int
	}{
		{"nvfp4", synth.NVFP4ModelOpt("m", w, 2, safetensors.F32), &Scheme{Method: "modelopt", Family: FamilyNVFP4}, "e2m1", 3 * 16},
		{"mxfp4", synth.MXFP4("m", w), &Scheme{Method: "mxfp4", Family: FamilyMXFP4}, "e2m1", 3 * 8},
		{"fp8 block", synth.FP8Block("m", w, 128), &Scheme{Method: "fp8", Family: FamilyFP8, WeightBlockSize: []int{128, 128}}, "e4m3", 2},
		{"fp8 channel", synth.FP8Channel("m", w), &Scheme{Method: "compressed-tensors", Family: FamilyFP8}, "e4m3", 3},
		{"ct int4", synth.CTPack("m", w, 4, 128, true, packing.CTBitstream), &Scheme{Method: "compressed-tensors", Groups: []ConfigGroup{{Targets: []string{"Linear"}, Weights: &QuantArgs{NumBits: 4, Type: "int", GroupSize: 128}}}}, "int4", 3 * 2},
		{"gptq", synth.GPTQ("m", w, 4, 128), &Scheme{Method: "gptq", Bits: 4, GroupSize: 128, CheckpointFormat: "gptq"}, "int4", 2 * 3},
		{"awq", synth.AWQ("m", w, 128), &Scheme{Method: "awq", Bits: 4, GroupSize: 128}, "int4", 2 * 3},
	}
	for _, c := range cases {
		mem := newMem(t, c.ts)
		mods := Group(mem.infos(), c.s, func(string) ([]int64, bool) { return []int64{16, 256}, true })
		m := mods[0]
		s, err := SampleRows(m, mem, 4, 7, 0, 256)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		whole, _ := Dequantize(m, mem, 0, 16)
		if s.Rows != 3 || s.Cols != 256 || len(s.Values) != 3*256 || s.Values[5] != whole[4*256+5] {
			t.Fatalf("%s: sample %d×%d", c.name, s.Rows, s.Cols)
		}
		total := 0
		for _, cc := range s.Codes {
			total += cc.Count
		}
		if s.CodeKind != c.kind || total != 3*256 || len(s.Scales) != c.scales {
			t.Errorf("%s: kind %s, %d codes counted, %d scales", c.name, s.CodeKind, total, len(s.Scales))
		}
	}
}

// A window of a GPTQ or AWQ module reads only the qweight rows of its columns
// and gives the same values as the whole rows.
func TestDequantizeWindow(t *testing.T) {
	w := weights(11, 16, 256)
	for _, c := range []struct {
		name string
		ts   []safetensors.WriteTensor
		s    *Scheme
	}{
		{"gptq", synth.GPTQ("m", w, 4, 128), &Scheme{Method: "gptq", Bits: 4, GroupSize: 128, CheckpointFormat: "gptq"}},
		{"gptq3", synth.GPTQ("m", w, 3, 128), &Scheme{Method: "gptq", Bits: 3, GroupSize: 128, CheckpointFormat: "gptq"}},
		{"awq", synth.AWQ("m", w, 128), &Scheme{Method: "awq", Bits: 4, GroupSize: 128}},
		{"nvfp4", synth.NVFP4ModelOpt("m", w, 2, safetensors.F32), &Scheme{Method: "modelopt", Family: FamilyNVFP4}},
	} {
		mem := &countingReader{memFile: newMem(t, c.ts)}
		m := Group(mem.infos(), c.s, nil)[0]
		whole, err := Dequantize(m, mem, 0, 16)
		if err != nil {
			t.Fatal(err)
		}
		mem.read, mem.qweight = 0, 0
		win, err := DequantizeWindow(m, mem, 3, 9, 37, 70)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for r := 3; r < 9; r++ {
			for col := 37; col < 70; col++ {
				if win[(r-3)*33+col-37] != whole[r*256+col] {
					t.Fatalf("%s: [%d,%d] differs", c.name, r, col)
				}
			}
		}
		if c.name != "nvfp4" {
			qw, _ := m.Info("qweight")
			if mem.qweight >= int64(qw.NBytes) {
				t.Errorf("%s: a 33-column window read %d of the qweight's %d bytes", c.name, mem.qweight, qw.NBytes)
			}
		}
	}
}

type countingReader struct {
	*memFile
	read, qweight int64
}

func (c *countingReader) ReadTensor(name string, off, n int64) ([]byte, error) {
	c.read += n
	if strings.HasSuffix(name, ".qweight") {
		c.qweight += n
	}
	return c.memFile.ReadTensor(name, off, n)
}

// A 3-D (MoE) pack-quantized weight: rows pack as one stack, zero points
// per expert slice along that expert's outputs (3 experts × 5 outputs, so
// a slice's 3-bit zero points do not fill whole words).
func TestCTPack3D(t *testing.T) {
	const experts, out, in = 3, 5, 256
	var packed, zps, scales []byte
	var want []float32
	for e := range experts {
		w := weights(uint64(20+e), out, in)
		ts := synth.CTPack("m", w, 3, 128, false, packing.CTPerWord)
		for _, x := range ts {
			switch x.Name {
			case "m.weight_packed":
				packed = append(packed, x.Data...)
			case "m.weight_zero_point":
				zps = append(zps, x.Data...)
			case "m.weight_scale":
				scales = append(scales, x.Data...)
			}
		}
		mem := newMem(t, ts)
		s2 := &Scheme{Method: "compressed-tensors", Version: "0.17.1", Groups: []ConfigGroup{{Targets: []string{"Linear"}, Weights: &QuantArgs{NumBits: 3, Type: "int", GroupSize: 128}}}}
		m := Group(mem.infos(), s2, func(string) ([]int64, bool) { return []int64{out, in}, true })[0]
		v, err := Dequantize(m, mem, 0, out)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, v...)
	}
	p := uint64(packing.CTWordsPerRow(in, 3, packing.CTPerWord))
	pz := uint64(packing.CTWordsPerRow(out, 3, packing.CTPerWord))
	mem := newMem(t, []safetensors.WriteTensor{
		{Name: "e.weight_packed", DType: safetensors.I32, Shape: []uint64{experts, out, p}, Data: packed},
		{Name: "e.weight_scale", DType: safetensors.BF16, Shape: []uint64{experts, out, 2}, Data: scales},
		{Name: "e.weight_zero_point", DType: safetensors.I32, Shape: []uint64{experts, pz, 2}, Data: zps},
		{Name: "e.weight_shape", DType: safetensors.I64, Shape: []uint64{3}, Data: make([]byte, 24)},
	})
	s := &Scheme{Method: "compressed-tensors", Version: "0.17.1", Groups: []ConfigGroup{{Targets: []string{"Linear"}, Weights: &QuantArgs{NumBits: 3, Type: "int", GroupSize: 128}}}}
	m := Group(mem.infos(), s, func(string) ([]int64, bool) { return []int64{experts, out, in}, true })[0]
	got, err := Dequantize(m, mem, 0, experts*out)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatal("3-D dequantization differs from the experts' own")
	}
}

func TestValueStats(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	st := ValueStats([]float32{1, 2, 3, nan, inf, -inf, 6})
	if st.Min != 1 || st.Max != 6 || st.Mean != 3 || st.NaN != 1 || st.Inf != 2 || math.Abs(st.Std-math.Sqrt(3.5)) > 1e-12 {
		t.Fatalf("%+v", st)
	}
	if st := ValueStats([]float32{nan}); st.NaN != 1 || st.Mean == st.Mean {
		t.Fatalf("all NaN: %+v", st)
	}
}
