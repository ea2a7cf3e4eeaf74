package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/packing"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/synth"
)

// differing lists the modules with a config-format-differs finding, sorted,
// after checking that each names its module's weight and both formats.
func differing(t *testing.T, c *Checkpoint) []string {
	t.Helper()
	var out []string
	for _, f := range c.Findings {
		if f.Rule != RuleDeclaredOtherFormat {
			continue
		}
		if f.Severity != scheme.SeverityError || f.Tensor == "" || !strings.HasPrefix(f.Tensor, f.Module+".") || !strings.Contains(f.Message, "declares") {
			t.Errorf("finding %+v: want an error naming the module's weight and the declared format", f)
		}
		out = append(out, f.Module)
	}
	slices.Sort(out)
	return out
}

// twoFormats is a repo of one FP8 attention projection and one NVFP4 MLP
// projection (ModelOpt naming) under the given hf_quant_config.json.
func twoFormats(t *testing.T, hfQuant string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	os.MkdirAll(dir, 0o755)
	one := []byte{0, 0, 0x80, 0x3f} // float32 1
	b, err := safetensors.Encode([]safetensors.WriteTensor{
		{Name: "model.layers.0.self_attn.q_proj.weight", DType: safetensors.F8_E4M3, Shape: []uint64{16, 32}, Data: make([]byte, 16*32)},
		{Name: "model.layers.0.self_attn.q_proj.weight_scale", DType: safetensors.F32, Shape: []uint64{}, Data: one},
		{Name: "model.layers.0.mlp.up_proj.weight", DType: safetensors.U8, Shape: []uint64{16, 16}, Data: make([]byte, 16*16)},
		{Name: "model.layers.0.mlp.up_proj.weight_scale", DType: safetensors.F8_E4M3, Shape: []uint64{16, 2}, Data: make([]byte, 32)},
		{Name: "model.layers.0.mlp.up_proj.weight_scale_2", DType: safetensors.F32, Shape: []uint64{}, Data: one},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644)
	os.WriteFile(filepath.Join(dir, "hf_quant_config.json"), []byte(hfQuant), 0o644)
	return dir
}

// A module stored in another quantized format than the config declares for
// it is an error: a runtime would build the declared layer and read these
// bytes as its codes and scales. Where the config names each layer's
// format (MIXED_PRECISION), each module is held to its own.
func TestDeclaredFormatDiffers(t *testing.T) {
	const q, up = "model.layers.0.self_attn.q_proj", "model.layers.0.mlp.up_proj"
	for _, c := range []struct {
		name, hfQuant string
		want          []string
	}{
		{"NVFP4 declared", `{"quantization":{"quant_algo":"NVFP4","group_size":16}}`, []string{q}},
		{"FP8 declared", `{"quantization":{"quant_algo":"FP8"}}`, []string{up}},
		{"per layer, as stored", `{"quantization":{"quant_algo":"MIXED_PRECISION","quantized_layers":{
			"` + q + `":{"quant_algo":"FP8"},"` + up + `":{"quant_algo":"NVFP4","group_size":16}}}}`, nil},
		{"per layer, swapped", `{"quantization":{"quant_algo":"MIXED_PRECISION","quantized_layers":{
			"` + q + `":{"quant_algo":"NVFP4","group_size":16},"` + up + `":{"quant_algo":"FP8"}}}}`, []string{up, q}},
		{"per layer, one unnamed", `{"quantization":{"quant_algo":"MIXED_PRECISION","quantized_layers":{
			"` + up + `":{"quant_algo":"FP8"}}}}`, []string{up}},
		// An excluded module that is quantized anyway is another rule's finding.
		{"NVFP4 with the attention excluded", `{"quantization":{"quant_algo":"NVFP4","group_size":16,"exclude_modules":["*self_attn*"]}}`, nil},
	} {
		ck, err := loadPath(t, twoFormats(t, c.hfQuant))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := differing(t, ck); !slices.Equal(got, c.want) {
			t.Errorf("%s: findings on %q, want %q (all: %+v)", c.name, got, c.want, ck.Findings)
		}
		ck.Close()
	}
}

// The same for a compressed-tensors config group, and for a lone file's
// __metadata__ label.
func TestDeclaredFormatDiffersGroupsAndLoneFiles(t *testing.T) {
	r := synth.CTNVFP4()
	dir := writeRepo(t, r)
	ck := loadDir(t, dir, Options{})
	if got := differing(t, ck); len(got) != 0 {
		t.Fatalf("as generated: %q", got)
	}
	var quantized []string
	for _, m := range ck.Modules {
		if m.Quantized {
			quantized = append(quantized, m.Name)
		}
	}
	ck.Close()
	// The same group declared FP8 (8-bit float weights and activations, as
	// llm-compressor writes FP8_DYNAMIC), over the NVFP4 bytes.
	var cfg map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	qc := cfg["quantization_config"].(map[string]any)
	qc["format"] = "float-quantized"
	g := qc["config_groups"].(map[string]any)["group_0"].(map[string]any)
	g["weights"] = map[string]any{"num_bits": 8, "type": "float", "symmetric": true, "strategy": "channel"}
	g["input_activations"] = map[string]any{"num_bits": 8, "type": "float", "symmetric": true, "strategy": "token", "dynamic": true}
	relabelled, _ := json.Marshal(cfg)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(relabelled), 0o644)
	ck = loadDir(t, dir, Options{})
	if got := differing(t, ck); len(quantized) == 0 || !slices.Equal(got, quantized) {
		t.Errorf("NVFP4 bytes under an FP8 (float-quantized, 8-bit) group: findings on %q, want every quantized module %q", got, quantized)
	}
	ck.Close()

	// FP8 bytes (F8_E4M3) under each label a lone file can carry: another
	// family, or FP8 of the other variant, is the finding.
	for label, want := range map[string]string{"nvfp4": "stored fp8", "fp8_e4m3": "", "fp8_e5m2": "declares fp8 e5m2 for this module, but its weight is stored fp8 e4m3 (F8_E4M3)"} {
		md := map[string]string{scheme.MetaFormat: label, scheme.MetaNaming: "gptqmodel", scheme.MetaScale: "inverse"}
		if label == "nvfp4" {
			md = map[string]string{scheme.MetaFormat: label, scheme.MetaNaming: "modelopt"}
		}
		ck, err := loadPath(t, fp8File(t, filepath.Join(t.TempDir(), label), md))
		if err != nil {
			t.Fatal(err)
		}
		got := differing(t, ck)
		if want == "" && len(got) != 0 || want != "" && (len(got) != 1 || !findingSays(ck, want)) {
			t.Errorf("FP8 bytes labelled %s: findings on %q (%+v), want one saying %q", label, got, ck.Findings, want)
		}
		ck.Close()
	}
	// A config's fmt the same way (HF fine-grained FP8 / GPT-QModel).
	for fmtName, want := range map[string]int{"e4m3": 0, "float8_e4m3fn": 0, "e5m2": 1} {
		dir := filepath.Join(t.TempDir(), "repo")
		fp8File(t, dir, nil)
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"quantization_config":{"quant_method":"fp8","fmt":"`+fmtName+`"}}`), 0o644)
		ck, err := loadPath(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := differing(t, ck); len(got) != want {
			t.Errorf("F8_E4M3 bytes under fmt %s: findings on %q, want %d", fmtName, got, want)
		}
		ck.Close()
	}
}

func findingSays(c *Checkpoint, s string) bool {
	for _, f := range c.Findings {
		if f.Rule == RuleDeclaredOtherFormat && strings.Contains(f.Message, s) {
			return true
		}
	}
	return false
}

// No generated repo, each stored as its config says, has the finding.
func TestDeclaredFormatAgreesOnGeneratedRepos(t *testing.T) {
	for _, r := range synth.All() {
		ck := loadDir(t, writeRepo(t, r), Options{})
		if got := differing(t, ck); len(got) != 0 {
			t.Errorf("%s: findings on %q", r.ID, got)
		}
		ck.Close()
	}
}

// ctRepo writes tensors with a config.json of quantization_config qc.
func ctRepo(t *testing.T, qc string, tensors []safetensors.WriteTensor) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	os.MkdirAll(dir, 0o755)
	b, err := safetensors.Encode(tensors, nil)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures":["LlamaForCausalLM"],"quantization_config":`+qc+`}`), 0o644)
	return dir
}

func fp8CT(name string) []safetensors.WriteTensor {
	return []safetensors.WriteTensor{
		{Name: name + ".weight", DType: safetensors.F8_E4M3, Shape: []uint64{16, 32}, Data: make([]byte, 16*32)},
		{Name: name + ".weight_scale", DType: safetensors.F32, Shape: []uint64{16, 1}, Data: make([]byte, 4*16)},
	}
}

func nvfp4CT(name string) []safetensors.WriteTensor {
	return []safetensors.WriteTensor{
		{Name: name + ".weight_packed", DType: safetensors.U8, Shape: []uint64{16, 16}, Data: make([]byte, 16*16)},
		{Name: name + ".weight_scale", DType: safetensors.F8_E4M3, Shape: []uint64{16, 2}, Data: make([]byte, 32)},
		{Name: name + ".weight_global_scale", DType: safetensors.F32, Shape: []uint64{1}, Data: []byte{0, 0, 0x80, 0x3f}},
	}
}

// Configs that runtimes read as the bytes are stored get no finding:
// overlapping groups, where the one naming a module holds it over the one
// targeting its class; and, where the rule is not sure which format a
// config means, nothing: MXFP8 named by a top-level
// format and 8-bit float arguments, naive-quantized FP8, and MXFP8 bytes in
// a float-quantized group. (ModelOpt's INT4 AWQ: TestModelOptINT4AWQ.)
func TestDeclaredFormatNoFalseFindings(t *testing.T) {
	const q, up = "model.layers.0.self_attn.q_proj", "model.layers.0.mlp.up_proj"
	nvfp4Args := `{"num_bits":4,"type":"float","symmetric":true,"strategy":"tensor_group","group_size":16}`
	fp8Args := `{"num_bits":8,"type":"float","symmetric":true,"strategy":"channel"}`
	for _, c := range []struct {
		name string
		dir  string
	}{
		{"overlapping groups, a name over a class", ctRepo(t, `{"quant_method":"compressed-tensors","format":"mixed-precision","config_groups":{
			"group_0":{"targets":["Linear"],"format":"nvfp4-pack-quantized","weights":`+nvfp4Args+`},
			"group_1":{"targets":["re:.*self_attn.*"],"format":"float-quantized","weights":`+fp8Args+`}}}`,
			append(fp8CT(q), nvfp4CT(up)...))},
		{"MXFP8 by the top-level format", ctRepo(t, `{"quant_method":"compressed-tensors","format":"mxfp8-quantized","config_groups":{
			"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","symmetric":true,"strategy":"group","group_size":32}}}}`,
			[]safetensors.WriteTensor{
				{Name: up + ".weight", DType: safetensors.F8_E4M3, Shape: []uint64{16, 64}, Data: make([]byte, 16*64)},
				{Name: up + ".weight_scale", DType: safetensors.U8, Shape: []uint64{16, 2}, Data: make([]byte, 32)},
			})},
		{"naive-quantized FP8", ctRepo(t, `{"quant_method":"compressed-tensors","format":"naive-quantized","config_groups":{
			"group_0":{"targets":["Linear"],"format":"naive-quantized","weights":`+fp8Args+`}}}`, fp8CT(q))},
		{"naive-quantized without weight arguments", ctRepo(t, `{"quant_method":"compressed-tensors","format":"naive-quantized","config_groups":{
			"group_0":{"targets":["Linear"],"format":"naive-quantized"}}}`, fp8CT(q))},
		{"MXFP8 bytes in a float-quantized group of 32", ctRepo(t, `{"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{
			"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","symmetric":true,"strategy":"group","group_size":32}}}}`,
			[]safetensors.WriteTensor{
				{Name: up + ".weight", DType: safetensors.F8_E4M3, Shape: []uint64{16, 64}, Data: make([]byte, 16*64)},
				{Name: up + ".weight_scale", DType: safetensors.U8, Shape: []uint64{16, 2}, Data: make([]byte, 32)},
			})},
	} {
		ck, err := loadPath(t, c.dir)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := differing(t, ck); len(got) != 0 {
			t.Errorf("%s: findings on %q: %+v", c.name, got, ck.Findings)
		}
		ck.Close()
	}
	// Under the same overlapping groups, NVFP4 bytes in q_proj break the
	// FP8 group that names it.
	ck, err := loadPath(t, ctRepo(t, `{"quant_method":"compressed-tensors","format":"mixed-precision","config_groups":{
			"group_0":{"targets":["Linear"],"format":"nvfp4-pack-quantized","weights":`+nvfp4Args+`},
			"group_1":{"targets":["re:.*self_attn.*"],"format":"float-quantized","weights":`+fp8Args+`}}}`, append(nvfp4CT(q), nvfp4CT(up)...)))
	if err != nil {
		t.Fatal(err)
	}
	if got := differing(t, ck); !slices.Equal(got, []string{q}) {
		t.Errorf("NVFP4 bytes under the FP8 group that names them: findings on %q", got)
	}
	ck.Close()
	// An MXFP8 label (by the format; 8-bit float arguments of 32 say FP8 or
	// MXFP8) over FP8 bytes with per-channel F32 scales is a finding: a
	// runtime would read those scales as E8M0 exponents.
	ck, err = loadPath(t, ctRepo(t, `{"quant_method":"compressed-tensors","format":"mxfp8-quantized","config_groups":{
			"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","symmetric":true,"strategy":"group","group_size":32}}}}`, fp8CT(q)))
	if err != nil {
		t.Fatal(err)
	}
	if got := differing(t, ck); !slices.Equal(got, []string{q}) {
		t.Errorf("FP8 bytes under an MXFP8 label: findings on %q", got)
	}
	ck.Close()
}

// ModelOpt's INT4 AWQ exports (W4A16_AWQ, W4A8_AWQ, or a MIXED_PRECISION
// layer's) are int4 modules: U8 [out/2, in] holding pairs of rows, float
// group scales [out, in/group]. They were read as NVFP4 with wrong-dtype
// scales (W4A8) or as dense U8 (W4A16), each an error on a valid
// checkpoint. Here a weight is quantized and packed as the producer's export
// does (modelopt/torch/export/quant_utils.py: scale = block amax / 7 in
// float32, code = clamp(round-half-even(w / scale), −8, 7),
// pack_int4_in_uint8), and decoding gives code · scale bit for bit.
func TestModelOptINT4AWQ(t *testing.T) {
	const up = "model.layers.0.mlp.up_proj"
	const rows, cols, group = 32, 256, 128
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(math.Sin(0.71*float64(i+1))) * float32(1+i%5)
	}
	codes := make([]int8, rows*cols)
	scales := make([]float32, rows*cols/group)
	for r := range rows {
		for g := range cols / group {
			var amax float32
			for c := g * group; c < (g+1)*group; c++ {
				amax = max(amax, float32(math.Abs(float64(w[r*cols+c]))))
			}
			s := amax / 7
			scales[r*(cols/group)+g] = s
			for c := g * group; c < (g+1)*group; c++ {
				codes[r*cols+c] = int8(max(-8, min(7, math.RoundToEven(float64(w[r*cols+c]/s)))))
			}
		}
	}
	packed := make([]byte, rows/2*cols)
	for c := range cols {
		for k := range rows / 2 {
			packed[k*cols+c] = byte(codes[2*k*cols+c])&0x0F | (byte(codes[(2*k+1)*cols+c])&0x0F)<<4
		}
	}
	scaleBytes := make([]byte, 4*len(scales))
	for i, s := range scales {
		binary.LittleEndian.PutUint32(scaleBytes[4*i:], math.Float32bits(s))
	}
	pqs := make([]float32, cols) // the input's factors, exact in F16
	pqsBytes := make([]byte, 2*cols)
	for c := range pqs {
		pqs[c] = 0.25 * float32(1+c%7)
		binary.LittleEndian.PutUint16(pqsBytes[2*c:], numeric.Float32ToF16(pqs[c]))
	}
	write := func(hfQuant string, withS2 bool, sc []byte, scShape []uint64) string {
		dir := filepath.Join(t.TempDir(), "awq")
		os.MkdirAll(dir, 0o755)
		ts := []safetensors.WriteTensor{
			{Name: up + ".weight", DType: safetensors.U8, Shape: []uint64{rows / 2, cols}, Data: packed},
			{Name: up + ".weight_scale", DType: safetensors.F32, Shape: scShape, Data: sc},
			{Name: up + ".pre_quant_scale", DType: safetensors.F16, Shape: []uint64{cols}, Data: pqsBytes},
		}
		if withS2 {
			ts = append(ts, safetensors.WriteTensor{Name: up + ".weight_scale_2", DType: safetensors.F32, Shape: []uint64{}, Data: make([]byte, 4)})
		}
		b, err := safetensors.Encode(ts, nil)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644)
		os.WriteFile(filepath.Join(dir, "hf_quant_config.json"), []byte(hfQuant), 0o644)
		return dir
	}
	for _, c := range []struct {
		name, hfQuant string
		withS2        bool
	}{
		{"W4A16_AWQ", `{"quantization":{"quant_algo":"W4A16_AWQ","group_size":128}}`, false},
		{"W4A8_AWQ", `{"quantization":{"quant_algo":"W4A8_AWQ","group_size":128}}`, true},
		{"a MIXED_PRECISION layer", `{"quantization":{"quant_algo":"MIXED_PRECISION","quantized_layers":{"` + up + `":{"quant_algo":"W4A16_AWQ","group_size":128}}}}`, false},
	} {
		ck, err := loadPath(t, write(c.hfQuant, c.withS2, scaleBytes, []uint64{rows, cols / group}))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		m, ok := ck.Module(up)
		if !ok || m.Format != "int4" || m.Layout != scheme.LayoutModelOptAWQ || !m.Quantized || m.GroupSize != group ||
			!slices.Equal(m.WeightShape, []uint64{rows, cols}) || m.Parameters != rows*cols {
			t.Fatalf("%s: module %+v", c.name, m)
		}
		if len(ck.Findings) != 0 {
			t.Errorf("%s: findings on a valid export: %+v", c.name, ck.Findings)
		}
		if other, _ := ck.Module(up + ".pre_quant_scale"); other != m || m.Tensors()["pre_quant_scale"] != up+".pre_quant_scale" || len(ck.Modules) != 1 {
			t.Errorf("%s: pre_quant_scale is not the module's: %v", c.name, m.Tensors())
		}
		all, err := scheme.Dequantize(m, ck, 0, rows)
		if err != nil {
			t.Fatal(err)
		}
		// The weight the raw input meets: stored · pre_quant_scale, column by column.
		if err := scheme.FoldPreQuantScale(m, ck, all); err != nil {
			t.Fatal(err)
		}
		for k, x := range all {
			if want := float32(codes[k]) * scales[k/cols*(cols/group)+k%cols/group] * pqs[k%cols]; math.Float32bits(x) != math.Float32bits(want) {
				t.Fatalf("%s: folded value [%d, %d] is %g, want %g", c.name, k/cols, k%cols, x, want)
			}
		}
		// The page's sample: the codes of rows 3..7 counted, their scales.
		smp, err := scheme.SampleRows(m, ck, 3, 8, 0, cols)
		if err != nil {
			t.Fatal(err)
		}
		counts := map[int]int{}
		for _, q := range codes[3*cols : 8*cols] {
			counts[int(q)]++
		}
		for _, cc := range smp.Codes {
			if smp.CodeKind != "int4" || cc.Count != counts[cc.Code] {
				t.Fatalf("%s: sample codes %s %+v, want counts %v", c.name, smp.CodeKind, smp.Codes, counts)
			}
		}
		if len(smp.Scales) != 5*cols/group || smp.Scales[0] != scales[3*cols/group] {
			t.Errorf("%s: sample scales %v", c.name, smp.Scales)
		}
		for _, span := range [][2]int{{0, rows}, {3, 8}, {31, 32}} {
			v, err := scheme.Dequantize(m, ck, span[0], span[1])
			if err != nil {
				t.Fatalf("%s: rows %v: %v", c.name, span, err)
			}
			for i, x := range v {
				k := span[0]*cols + i
				if want := float32(codes[k]) * scales[k/cols*(cols/group)+k%cols/group]; math.Float32bits(x) != math.Float32bits(want) {
					t.Fatalf("%s: rows %v: value [%d, %d] is %g, want %g", c.name, span, k/cols, k%cols, x, want)
				}
			}
		}
		ck.Close()
	}
	// Scales that do not fit the groups are an error; so are scales for
	// pairs of rows (the grid would stretch them), when decoding too.
	for _, shape := range [][]uint64{{rows, 3}, {rows / 2, 2}} {
		n := shape[0] * shape[1]
		ck, err := loadPath(t, write(`{"quantization":{"quant_algo":"W4A16_AWQ","group_size":128}}`, false, make([]byte, 4*n), shape))
		if err != nil {
			t.Fatal(err)
		}
		if !hasRule(ck.Findings, "scale-shape") {
			t.Errorf("scales %v: findings %+v", shape, ck.Findings)
		}
		if m, _ := ck.Module(up); shape[0] == rows/2 {
			if _, err := scheme.Dequantize(m, ck, 0, 2); err == nil || !strings.Contains(err.Error(), "scale-shape") {
				t.Errorf("scales %v: decoding: %v", shape, err)
			}
		}
		ck.Close()
	}
	// A zero factor is refused by name.
	bad := slices.Clone(pqsBytes)
	bad[6], bad[7] = 0, 0
	pqsBytes, bad = bad, pqsBytes
	ck, err := loadPath(t, write(`{"quantization":{"quant_algo":"W4A16_AWQ","group_size":128}}`, false, scaleBytes, []uint64{rows, cols / group}))
	pqsBytes = bad
	if err != nil {
		t.Fatal(err)
	}
	m, _ := ck.Module(up)
	if err := scheme.FoldPreQuantScale(m, ck, make([]float32, rows*cols)); err == nil || !strings.Contains(err.Error(), "pre_quant_scale[3] is 0") {
		t.Errorf("a zero pre_quant_scale: %v", err)
	}
	ck.Close()
	// ModelOpt's MoE experts: [E, out/2, in] codes, [E, out, in/group] scales.
	moe := filepath.Join(t.TempDir(), "moe")
	os.MkdirAll(moe, 0o755)
	b, _ := safetensors.Encode([]safetensors.WriteTensor{
		{Name: "model.layers.0.mlp.experts.w1.weight", DType: safetensors.U8, Shape: []uint64{2, rows / 4, cols}, Data: packed},
		{Name: "model.layers.0.mlp.experts.w1.weight_scale", DType: safetensors.F32, Shape: []uint64{2, rows / 2, cols / group}, Data: scaleBytes},
	}, nil)
	os.WriteFile(filepath.Join(moe, "model.safetensors"), b, 0o644)
	os.WriteFile(filepath.Join(moe, "hf_quant_config.json"), []byte(`{"quantization":{"quant_algo":"W4A16_AWQ","group_size":128}}`), 0o644)
	ck, err = loadPath(t, moe)
	if err != nil {
		t.Fatal(err)
	}
	m, _ = ck.Module("model.layers.0.mlp.experts.w1")
	if m == nil || m.Layout != scheme.LayoutModelOptAWQ || !slices.Equal(m.WeightShape, []uint64{2, rows / 2, cols}) || m.GroupSize != group || len(ck.Findings) != 0 {
		t.Fatalf("MoE experts: %+v, findings %+v", m, ck.Findings)
	}
	v, err := scheme.Dequantize(m, ck, 0, rows)
	if err != nil {
		t.Fatal(err)
	}
	for k, x := range v { // the same bytes: each expert's rows pair up as the 2D weight's did
		if want := float32(codes[k]) * scales[k/cols*(cols/group)+k%cols/group]; math.Float32bits(x) != math.Float32bits(want) {
			t.Fatalf("MoE value %d is %g, want %g", k, x, want)
		}
	}
	ck.Close()
}

// compressed-tensors tiles an FP8 "block" weight by its block_structure,
// the last blocks partial: a [200, 300] weight in 128×128 blocks has [2, 3]
// scales, which the scale's shape alone reads as 100×100 blocks. Each
// value is its code times the scale of the 128×128 block holding it.
func TestCTBlockStructure(t *testing.T) {
	const rows, cols = 200, 300
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(math.Sin(0.37*float64(i))) * float32(1+(i/cols)/128*3+(i%cols)/128)
	}
	ts := synth.FP8Block("model.layers.0.self_attn.kv_a_proj_with_mqa", synth.Matrix{Shape: []uint64{rows, cols}, Data: w}, 128)
	for i := range ts {
		ts[i].Name = strings.Replace(ts[i].Name, "weight_scale_inv", "weight_scale", 1) // compressed-tensors' name, a multiplier too
	}
	for _, c := range []struct {
		block string
		want  []int
	}{{"[128,128]", []int{128, 128}}, {"[64,128]", []int{64, 128}}} {
		dir := ctRepo(t, `{"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"group_0":{"targets":["Linear"],
			"weights":{"num_bits":8,"type":"float","symmetric":true,"strategy":"block","block_structure":`+c.block+`}}}}`, ts)
		ck, err := loadPath(t, dir)
		if err != nil {
			t.Fatal(err)
		}
		m, ok := ck.Module("model.layers.0.self_attn.kv_a_proj_with_mqa")
		if !ok || m.Layout != scheme.LayoutFP8Block || !slices.Equal(m.Block, c.want) {
			t.Fatalf("block_structure %s: module %+v", c.block, m)
		}
		if c.want[0] != 128 { // the file's [2, 3] scales do not tile 64-row blocks: said, not decoded wrong
			if !hasRule(ck.Findings, "scale-shape") {
				t.Errorf("block_structure %s against [2, 3] scales: no scale-shape finding: %+v", c.block, ck.Findings)
			}
			continue
		}
		if len(ck.Findings) != 0 {
			t.Errorf("findings on a valid export: %+v", ck.Findings)
		}
		got, err := scheme.Dequantize(m, ck, 0, rows)
		if err != nil {
			t.Fatal(err)
		}
		codes := ts[0].Data
		scales, err := numeric.Decode(safetensors.F32, ts[1].Data)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range got {
			r, col := i/cols, i%cols
			want := numeric.E4M3ToFloat32(codes[i]) * scales[(r/128)*3+col/128]
			if math.Float32bits(v) != math.Float32bits(want) {
				t.Fatalf("[%d, %d] = %g, want code × its 128×128 block's scale %g", r, col, v, want)
			}
		}
	}
}

// label-vs-bytes weighs only the modules the config calls quantized: a
// small model's 16-bit embedding (tied, so no head) or a vision tower left
// unquantized on purpose may hold most of the bytes without the label
// being wrong. A Mamba conv1d [C, 1, K] is no Linear a "Linear" group
// quantizes.
func TestLabelWeighsDeclaredModules(t *testing.T) {
	const vocab, hidden = 8192, 256
	w := make([]float32, hidden*hidden)
	for i := range w {
		w[i] = float32(math.Sin(float64(i))) * 0.02
	}
	ts := synth.GPTQ("model.layers.0.mlp.down_proj", synth.Matrix{Shape: []uint64{hidden, hidden}, Data: w}, 4, 128)
	ts = append(ts, safetensors.WriteTensor{Name: "model.embed_tokens.weight", DType: safetensors.BF16, Shape: []uint64{vocab, hidden}, Data: make([]byte, 2*vocab*hidden)},
		safetensors.WriteTensor{Name: "model.layers.0.mamba.conv1d.weight", DType: safetensors.BF16, Shape: []uint64{hidden, 1, 4}, Data: make([]byte, 2*hidden*4)})
	dir := ctRepo(t, `{"quant_method":"gptq","bits":4,"group_size":128,"sym":false,"checkpoint_format":"gptq"}`, ts)
	ck, err := loadPath(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range ck.Findings {
		if f.Severity == scheme.SeverityError || f.Severity == scheme.SeverityWarning {
			t.Errorf("finding on a small GPTQ model with a large embedding: %+v", f)
		}
	}
	ct := ctRepo(t, `{"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":{"group_0":{"targets":["Linear"],
		"weights":{"num_bits":4,"type":"int","symmetric":true,"strategy":"group","group_size":128}}},"ignore":["lm_head"]}`,
		append(synth.CTPack("model.layers.0.mlp.down_proj", synth.Matrix{Shape: []uint64{hidden, hidden}, Data: w}, 4, 128, true, packing.CTBitstream),
			safetensors.WriteTensor{Name: "model.layers.0.mamba.conv1d.weight", DType: safetensors.BF16, Shape: []uint64{hidden, 1, 4}, Data: make([]byte, 2*hidden*4)}))
	if ck, err = loadPath(t, ct); err != nil {
		t.Fatal(err)
	}
	for _, f := range ck.Findings {
		if f.Severity == scheme.SeverityError || f.Severity == scheme.SeverityWarning {
			t.Errorf("finding on a conv1d beside a Linear group: %+v", f)
		}
	}
}
