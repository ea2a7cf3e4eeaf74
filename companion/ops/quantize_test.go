package ops

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/numeric"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
)

const testModule = "model.layers.0.mlp.down_proj"

// denseSource writes a one-file checkpoint with a float32 weight [rows, cols]
// and a bf16 bias, and returns its path and the weight.
func denseSource(t *testing.T, rows, cols int) (string, []float32, []byte) {
	t.Helper()
	r := rand.New(rand.NewPCG(3, 4))
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(r.NormFloat64() * math.Pow(10, float64(i/cols%3)-2))
	}
	bias := make([]byte, 2*rows)
	for i := range rows {
		binary.LittleEndian.PutUint16(bias[2*i:], numeric.Float32ToBF16(float32(i)-3.5))
	}
	wb := make([]byte, 4*len(w))
	for i, x := range w {
		binary.LittleEndian.PutUint32(wb[4*i:], math.Float32bits(x))
	}
	data, err := safetensors.Encode([]safetensors.WriteTensor{
		{Name: testModule + ".weight", DType: safetensors.F32, Shape: []uint64{uint64(rows), uint64(cols)}, Data: wb},
		{Name: testModule + ".bias", DType: safetensors.BF16, Shape: []uint64{uint64(rows)}, Data: bias},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "dense.safetensors")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, w, bias
}

func load(t *testing.T, path string) *checkpoint.Checkpoint {
	t.Helper()
	src, err := hub.OpenLocal(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.Load(context.Background(), src, checkpoint.Options{ReadShapeTensors: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func f32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// TestQuantizeRoundTrip quantizes a dense module in every format × naming,
// writes it, reads it back through checkpoint.Load, and checks that the
// reader sees the format and decodes the values the stored codes and scales
// mean, computed here from the tensors by each naming's formula.
func TestQuantizeRoundTrip(t *testing.T) {
	const rows, cols = 24, 64
	srcPath, w, bias := denseSource(t, rows, cols)
	src := load(t, srcPath)
	cases := []struct {
		params string
		method string
		names  []string
	}{
		{`{"format":"nvfp4"}`, "modelopt", []string{"weight", "weight_scale", "weight_scale_2"}},
		{`{"format":"nvfp4","recipe":"mse","naming":"compressed-tensors"}`, "compressed-tensors", []string{"weight_packed", "weight_scale", "weight_global_scale"}},
		{`{"format":"nvfp4","recipe":"least_squares","naming":"modelopt"}`, "modelopt", []string{"weight", "weight_scale", "weight_scale_2"}},
		{`{"format":"fp8_e4m3"}`, "fp8", []string{"weight", "weight_scale_inv"}},
		{`{"format":"fp8_e5m2","scale":"tensor","naming":"gptqmodel"}`, "fp8", []string{"weight", "weight_scale_inv"}},
		{`{"format":"fp8_e4m3","block":"8,32"}`, "fp8", []string{"weight", "weight_scale_inv"}},
		{`{"format":"fp8_e4m3","naming":"modelopt"}`, "modelopt", []string{"weight", "weight_scale"}},
		{`{"format":"fp8_e4m3","scale":"tensor","naming":"modelopt"}`, "modelopt", []string{"weight", "weight_scale"}},
		{`{"format":"fp8_e4m3","scale":"block","block":"4,16","naming":"compressed-tensors"}`, "compressed-tensors", []string{"weight", "weight_scale"}},
		{`{"format":"fp8_e5m2","naming":"compressed-tensors"}`, "compressed-tensors", []string{"weight", "weight_scale"}},
	}
	for _, tc := range cases {
		t.Run(tc.params, func(t *testing.T) {
			dir := t.TempDir()
			op, _ := Lookup("quantize")
			res, err := op(context.Background(), Env{Checkpoint: src, Backend: &cpu.Backend{Workers: 2}, WriteDir: dir}, testModule, json.RawMessage(tc.params[:len(tc.params)-1]+`,"path":"q.safetensors"}`))
			if err != nil {
				t.Fatal(err)
			}
			c := load(t, res.Files[0].Path)
			if c.Scheme.Method != tc.method || c.Scheme.DeclaredIn[0] != "__metadata__" {
				t.Fatalf("scheme %+v, want method %s declared in __metadata__", c.Scheme, tc.method)
			}
			for _, f := range c.Findings {
				if f.Severity == scheme.SeverityError || f.Severity == scheme.SeverityWarning {
					t.Errorf("finding on the written file: %+v", f)
				}
			}
			m, ok := c.Module(testModule)
			if !ok || !m.Quantized || m.WeightShape[0] != rows || m.WeightShape[1] != cols {
				t.Fatalf("module %+v", m)
			}
			for _, role := range tc.names {
				if m.Tensors()[role] != testModule+"."+role {
					t.Fatalf("role %s: tensors %v", role, m.Tensors())
				}
			}
			read := func(role string) []byte {
				info, _ := m.Info(role)
				b, err := c.ReadTensor(info.Name, 0, int64(info.NBytes))
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			if b := read("bias"); string(b) != string(bias) {
				t.Fatal("bias not copied")
			}
			got, err := scheme.Dequantize(m, c, 0, rows)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float32, rows*cols)
			if m.Format == scheme.FormatNVFP4 {
				codes, scales := read(tc.names[0]), read("weight_scale")
				g := f32s(read(tc.names[2]))[0]
				if tc.method == "compressed-tensors" {
					g = 1 / g // weight_global_scale is 1/scale_2
				}
				for i := range want {
					c := codes[i/2] >> (4 * (i % 2)) & 0xF
					want[i] = numeric.E2M1ToFloat32(c) * float32(numeric.E4M3ToFloat32(scales[(i/cols)*(cols/16)+(i%cols)/16])*g)
				}
			} else {
				codes := read("weight")
				sc := f32s(read(tc.names[1]))
				dec := numeric.E4M3ToFloat32
				if strings.Contains(tc.params, "e5m2") {
					dec = numeric.E5M2ToFloat32
				}
				br, bc := rows, cols // tensor
				switch {
				case strings.Contains(tc.params, `"8,32"`):
					br, bc = 8, 32
				case strings.Contains(tc.params, `"4,16"`):
					br, bc = 4, 16
				case len(sc) == rows:
					br, bc = 1, cols
				}
				for i := range want {
					s := sc[(i/cols/br)*(cols/bc)+(i%cols)/bc]
					if tc.method == "fp8" {
						want[i] = dec(codes[i]) / s
					} else {
						want[i] = dec(codes[i]) * s
					}
				}
			}
			var noise, sig float64
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("value %d: decoded %g, the stored codes mean %g", i, got[i], want[i])
				}
				d := float64(got[i] - w[i])
				noise, sig = noise+d*d, sig+float64(w[i])*float64(w[i])
			}
			if sqnr := 10 * math.Log10(sig/noise); sqnr < 15 {
				t.Fatalf("SQNR %.1f dB: the read-back values are not the weight's", sqnr)
			}
		})
	}
}

func TestQuantizeParamErrors(t *testing.T) {
	srcPath, _, _ := denseSource(t, 8, 48)
	src := load(t, srcPath)
	op, _ := Lookup("quantize")
	for params, want := range map[string]string{
		`{"format":"nvfp4","naming":"gptqmodel"}`:            "quantize-naming",
		`{"format":"fp8_e4m3","block":"5,16"}`:               "does not divide",
		`{"format":"fp8_e4m3","block":"x"}`:                  "fp8-block",
		`{"format":"nvfp4","recipe":"local_hessian"}`:        "--data",
		`{"format":"int3"}`:                                  "unknown format",
		`{"format":"fp8_e4m3","scale":"row","block":"8,16"}`: "--block goes with --scale block",
		`{"format":"nvfp4","recipe":"max","extra":1}`:        "unknown field",
	} {
		_, err := op(context.Background(), Env{Checkpoint: src, Backend: cpu.New()}, testModule, json.RawMessage(params))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", params, err, want)
		}
	}
	// 48 columns: FP8 fine, NVFP4 refuses (48 % 16 == 0, so use a 40-wide weight)
	srcPath, _, _ = denseSource(t, 8, 40)
	src = load(t, srcPath)
	if _, err := op(context.Background(), Env{Checkpoint: src, Backend: cpu.New()}, testModule, json.RawMessage(`{"format":"nvfp4"}`)); err == nil || !strings.Contains(err.Error(), "nvfp4-shape") || !strings.Contains(err.Error(), testModule) {
		t.Fatalf("in %% 16 != 0: %v", err)
	}
}

func TestReportOp(t *testing.T) {
	srcPath, _, _ := denseSource(t, 16, 64)
	src := load(t, srcPath)
	op, _ := Lookup("report")
	res, err := op(context.Background(), Env{Checkpoint: src, Backend: cpu.New()}, testModule, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res.JSON)
	var out struct {
		Module  string
		Shape   []int
		Recipes []map[string]any
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Module != testModule || out.Shape[0] != 16 || out.Shape[1] != 64 || len(out.Recipes) != 4 || len(res.Arrays) != 4 {
		t.Fatalf("report %s", b)
	}
	for i, name := range []string{"max", "mse", "four_six", "least_squares"} {
		r := out.Recipes[i]
		if r["recipe"] != name {
			t.Fatalf("recipe %d is %v", i, r["recipe"])
		}
		for _, k := range []string{"mse", "sqnr_db", "max_abs_err", "blocks_changed"} {
			if _, ok := r[k].(float64); !ok {
				t.Fatalf("%s: %s missing or not a number in %s", name, k, b)
			}
		}
	}
}

// A file is written only at a relative path under the companion's output
// folder; otherwise its bytes come back.
func TestQuantizePath(t *testing.T) {
	srcPath, _, _ := denseSource(t, 8, 48)
	src := load(t, srcPath)
	op, _ := Lookup("quantize")
	dir, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "afile"), nil, 0o644)
	run := func(wdir, path string) (*Result, error) {
		params, _ := json.Marshal(map[string]string{"format": "fp8_e4m3", "path": path})
		if path == "" {
			params = []byte(`{"format":"fp8_e4m3"}`)
		}
		return op(context.Background(), Env{Checkpoint: src, Backend: cpu.New(), WriteDir: wdir}, testModule, params)
	}
	for _, tc := range []struct{ dir, path, want string }{
		{"", "q.safetensors", "--out-dir"},
		{dir, "../q.safetensors", "not a relative path inside"},
		{dir, filepath.Join(outside, "q.safetensors"), "not a relative path inside"},
		{dir, "link/q.safetensors", "quantize-path"},
		{dir, "missing/q.safetensors", `"missing/q.safetensors": its folder missing does not exist under the companion's output folder`},
		{dir, "sub", `"sub" is a folder under`},
		{dir, "afile/q.safetensors", `"afile/q.safetensors": afile under ` + dir + ` is a file, not a folder`},
		{dir, "link/q.safetensors", `"link/q.safetensors": its folder link under ` + dir + ` cannot be used`},
	} {
		if _, err := run(tc.dir, tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("dir %q path %q: err %v, want %q", tc.dir, tc.path, err, tc.want)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("written outside the output folder: %v", ents)
	}
	res, err := run(dir, "q.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	on, err := os.ReadFile(filepath.Join(dir, "q.safetensors"))
	if err != nil || res.Files[0].Path != filepath.Join(dir, "q.safetensors") || res.Files[0].Data != nil {
		t.Fatalf("written %+v: %v", res.Files[0], err)
	}
	res, err = run(dir, "")
	if err != nil || res.Files[0].Path != "" || string(res.Files[0].Data) != string(on) {
		t.Fatalf("without a path the bytes come back, the same as written: %v", err)
	}
}

// Reading the module's weight is the first fifth of quantize and report: it
// reports progress as it goes and a cancel stops it between bands, before
// the kernel starts, instead of waiting for the whole read.
func TestQuantizeReadProgressAndCancel(t *testing.T) {
	const rows, cols = 4096, 256 // 8 bands of 512 KiB
	srcPath, _, _ := denseSource(t, rows, cols)
	src := load(t, srcPath)
	params := map[string]json.RawMessage{"quantize": json.RawMessage(`{"format":"nvfp4","recipe":"max"}`), "report": nil}
	for _, name := range []string{"quantize", "report"} {
		op, _ := Lookup(name)
		// Uncancelled: progress rises through the read (first fifth: its
		// bands are reported in row order by one goroutine at a time) and
		// the kernel (the rest, from several goroutines, in any order) to
		// the end.
		var mu sync.Mutex
		var lastRead, top float64
		var halves [2]int
		env := Env{Checkpoint: src, Backend: cpu.New(), Progress: func(done, total int64) {
			mu.Lock()
			defer mu.Unlock()
			f := float64(done) / float64(total)
			top = max(top, f)
			if f <= 0.2 {
				halves[0]++
				if total != 5*rows || done%512 != 0 { // the read's bands of 512 rows
					t.Errorf("%s: read progress %d/%d, want bands of 512 rows out of 5×%d", name, done, total, rows)
				}
				if f < lastRead || halves[1] > 0 {
					t.Errorf("%s: read progress %.3f after %.3f (kernel reports so far: %d)", name, f, lastRead, halves[1])
				}
				lastRead = f
			} else {
				halves[1]++
			}
		}}
		if _, err := op(context.Background(), env, testModule, params[name]); err != nil {
			t.Fatal(err)
		}
		if top != 1 || halves[0] < 8 || halves[1] == 0 {
			t.Errorf("%s: progress reached %.3f with %v reports in the read and the kernel", name, top, halves)
		}
		// Cancelled after the read's second band: the op returns
		// context.Canceled without reaching the kernel's part.
		ctx, cancel := context.WithCancel(context.Background())
		calls, beyond := 0, false
		env.Progress = func(done, total int64) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls == 2 {
				cancel()
			}
			if float64(done)/float64(total) > 0.2 {
				beyond = true
			}
		}
		_, err := op(ctx, env, testModule, params[name])
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s cancelled during the read: err %v, want context.Canceled", name, err)
		}
		if beyond || calls > 2+2 { // bands already decoding when the cancel came may still count
			t.Errorf("%s: %d progress reports after a cancel at the second (kernel reached: %v)", name, calls, beyond)
		}
	}
}

// A file name that cannot travel as a frame's name is refused before any
// work, naming the parameter and the rule; a default name from a very long
// module name is cut to fit.
func TestQuantizeOutName(t *testing.T) {
	p := QuantizeParams{Format: "nvfp4", Out: strings.Repeat("x", 1100) + ".safetensors"}
	if err := p.normalize(); err == nil || !strings.Contains(err.Error(), "rule quantize-options: out:") {
		t.Errorf("a 1,112-byte out: %v", err)
	}
	p = QuantizeParams{Format: "nvfp4", Out: "dir/w.safetensors"}
	if err := p.normalize(); err != nil {
		t.Errorf("a short out: %v", err)
	}
	if n := outName("", strings.Repeat("é", 800), "fp8_e4m3"); len(n) > maxFileName || !strings.HasSuffix(n, ".fp8_e4m3.safetensors") || !utf8.ValidString(n) {
		t.Errorf("the default name of a 1,600-byte module: %d bytes, %q…", len(n), n[len(n)-30:])
	}
	if n := outName("", "model.layers.0.mlp", "nvfp4"); n != "model.layers.0.mlp.nvfp4.safetensors" {
		t.Errorf("default name %q", n)
	}
}

// A weight with no input columns takes no activations (it divided by zero).
func TestActivationsOfEmptyWeight(t *testing.T) {
	p := filepath.Join(t.TempDir(), "act.bin")
	os.WriteFile(p, make([]byte, 64), 0o644)
	if _, err := ReadActivations(p, "", 0); err == nil || !strings.Contains(err.Error(), "rule local-hessian-data") {
		t.Errorf("activations for a 0-column weight: %v", err)
	}
}

// calibrate's note beside an activations file names their module: another
// module refuses them; a note that does not describe the file (rewritten
// since by something else) is not believed.
func TestActivationsNote(t *testing.T) {
	p := filepath.Join(t.TempDir(), "act.f32")
	os.WriteFile(p, make([]byte, 4*5*768), 0o644)
	os.WriteFile(p+".json", []byte(`{"module":"a.down_proj","tokens":5,"in":768}`), 0o644)
	if _, err := ReadActivations(p, "a.down_proj", 768); err != nil {
		t.Errorf("its own module: %v", err)
	}
	if _, err := ReadActivations(p, "a.up_proj", 256); err == nil || !strings.Contains(err.Error(), `the inputs of module "a.down_proj"`) {
		t.Errorf("another module whose width divides them: %v", err)
	}
	os.WriteFile(p, make([]byte, 4*7*256), 0o644) // another tool's inputs, the old note left beside them
	if m, err := ReadActivations(p, "a.up_proj", 256); err != nil || m.Rows != 7 {
		t.Errorf("a stale note: %v", err)
	}
}

// A BF16 module keeps its dtype through a direct division, as its
// producers' PyTorch code does: compressed-tensors computes and stores the
// scale in BF16 (its tensor scale [1], its channel scale [out, 1]) and
// divides in BF16; ModelOpt's per-tensor export divides by its 0-dim F32
// scale in BF16, its per-row [out] F32 scale in float32; GPT-QModel
// multiplies in float32. The codes are the kernel's under those options,
// and the written file reads back to codes · scale.
func TestQuantizeSixteenBitSource(t *testing.T) {
	const rows, cols = 24, 64
	r := rand.New(rand.NewPCG(8, 9))
	w := make([]float32, rows*cols)
	wb := make([]byte, 2*len(w))
	for i := range w {
		h := numeric.Float32ToBF16(float32(r.NormFloat64() * 0.02))
		w[i] = numeric.BF16ToFloat32(h)
		binary.LittleEndian.PutUint16(wb[2*i:], h)
	}
	data, err := safetensors.Encode([]safetensors.WriteTensor{
		{Name: testModule + ".weight", DType: safetensors.BF16, Shape: []uint64{rows, cols}, Data: wb},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "bf16.safetensors")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	src := load(t, p)
	for _, c := range []struct {
		params     string
		opt        kernels.FP8Options
		scaleDType safetensors.DType
		scaleShape []uint64
	}{
		{`{"format":"fp8_e4m3","scale":"tensor","naming":"compressed-tensors"}`,
			kernels.FP8Options{Scale: "tensor", Half: "bf16", HalfScale: true}, safetensors.BF16, []uint64{1}},
		{`{"format":"fp8_e4m3","scale":"row","naming":"compressed-tensors"}`,
			kernels.FP8Options{Scale: "row", Half: "bf16", HalfScale: true}, safetensors.BF16, []uint64{rows, 1}},
		{`{"format":"fp8_e4m3","scale":"tensor","naming":"modelopt"}`,
			kernels.FP8Options{Scale: "tensor", Half: "bf16"}, safetensors.F32, []uint64{}},
		{`{"format":"fp8_e4m3","scale":"row","naming":"modelopt"}`,
			kernels.FP8Options{Scale: "row"}, safetensors.F32, []uint64{rows}},
		{`{"format":"fp8_e4m3","scale":"tensor","naming":"gptqmodel"}`,
			kernels.FP8Options{Scale: "tensor", Inverse: true}, safetensors.F32, []uint64{}},
	} {
		op, _ := Lookup("quantize")
		res, err := op(context.Background(), Env{Checkpoint: src, Backend: &cpu.Backend{Workers: 2}}, testModule, json.RawMessage(c.params))
		if err != nil {
			t.Fatalf("%s: %v", c.params, err)
		}
		want := "f32"
		if c.opt.Half != "" {
			want = c.opt.Half
		}
		if got := res.JSON.(map[string]any)["divides_in"]; got != want {
			t.Errorf("%s: divides_in %v, want %s", c.params, got, want)
		}
		h, err := safetensors.Parse("q", res.Files[0].Data)
		if err != nil {
			t.Fatal(err)
		}
		c.opt.Format = "e4m3"
		ref, err := (&cpu.Backend{Workers: 1}).QuantizeFP8(context.Background(), kernels.Matrix{Rows: rows, Cols: cols, Data: w}, c.opt, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range h.Tensors {
			body := res.Files[0].Data[h.DataStart()+int64(tn.Begin) : h.DataStart()+int64(tn.End)]
			switch {
			case tn.Name == testModule+".weight":
				if string(body) != string(ref.Codes) {
					t.Errorf("%s: codes differ from the kernel's under %+v", c.params, c.opt)
				}
			case strings.HasPrefix(tn.Name, testModule+".weight_scale"):
				if tn.DType != c.scaleDType || !slices.Equal(tn.Shape, c.scaleShape) {
					t.Errorf("%s: %s %s %v, want %s %v", c.params, tn.Name, tn.DType, tn.Shape, c.scaleDType, c.scaleShape)
				}
			}
		}
		dir := t.TempDir()
		qp := filepath.Join(dir, "q.safetensors")
		if err := os.WriteFile(qp, res.Files[0].Data, 0o644); err != nil {
			t.Fatal(err)
		}
		q := load(t, qp)
		m, ok := q.Module(testModule)
		if !ok || !m.Quantized {
			t.Fatalf("%s: module %+v", c.params, m)
		}
		got, err := scheme.Dequantize(m, q, 0, rows)
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range got {
			s := ref.Scales[0]
			if len(ref.Scales) == rows {
				s = ref.Scales[i/cols]
			}
			v := numeric.E4M3ToFloat32(ref.Codes[i]) * s
			if c.opt.Inverse {
				v = numeric.E4M3ToFloat32(ref.Codes[i]) / s
			}
			if math.Float32bits(x) != math.Float32bits(v) {
				t.Fatalf("%s: value %d decodes to %g, the codes and scales mean %g", c.params, i, x, v)
			}
		}
	}
}
