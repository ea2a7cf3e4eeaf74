package checkpoint

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/synth"
)

// The inventory's numbers follow from what the generator wrote: every module
// in the format it was stored in, parameters as logical elements (plus
// biases), bits per weight as 8·bytes/parameters.
func TestInventoryNumbers(t *testing.T) {
	for _, r := range synth.All() {
		t.Run(strings.TrimPrefix(r.ID, synth.Org+"/"), func(t *testing.T) {
			c := load(t, r)
			inv := c.Inventory()
			var params uint64
			byFormat := map[string]uint64{}
			quantized := 0
			for name, w := range r.Weights {
				n := uint64(len(w.Data))
				params += n
				byFormat[r.Formats[name]] += n
				if f := r.Formats[name]; f != "bf16" && f != "f32" {
					quantized++
				}
			}
			// Biases and other stored BF16 tensors the generator added beside weights.
			for _, te := range inv.Tensors {
				if _, ok := r.Weights[te.Module]; ok && (te.Role == "bias") || (te.Role == "tensor" && !slices.Contains(keys(r.Weights), te.Module)) {
					n := uint64(1)
					for _, d := range te.Shape {
						n *= d
					}
					params += n
					byFormat["bf16"] += n
				}
			}
			s := inv.Summary
			if s.Parameters != params {
				t.Errorf("parameters %d, want %d", s.Parameters, params)
			}
			for f, n := range byFormat {
				if s.ParamsByFormat[f] != n {
					t.Errorf("parameters_by_format[%s] = %d, want %d (%v)", f, s.ParamsByFormat[f], n, s.ParamsByFormat)
				}
			}
			if s.QuantizedModules != quantized {
				t.Errorf("quantized_modules %d, want %d", s.QuantizedModules, quantized)
			}
			var bytes uint64
			for _, p := range r.Paths() {
				if strings.HasSuffix(p, ".safetensors") {
					b := r.Files[p]
					bytes += uint64(len(b)) - 8 - binary.LittleEndian.Uint64(b)
				}
			}
			if s.Bytes != bytes {
				t.Errorf("bytes %d, want %d", s.Bytes, bytes)
			}
			if want := 8 * float64(bytes) / float64(params); math.Abs(s.BitsPerWeight-want) > 1e-9 {
				t.Errorf("bits per weight %v, want %v", s.BitsPerWeight, want)
			}
			var sum uint64
			for _, v := range s.BytesByDType {
				sum += v
			}
			if sum != s.Bytes || s.Tensors != len(inv.Tensors) {
				t.Errorf("bytes_by_dtype sums to %d of %d", sum, s.Bytes)
			}
			// bytes_by_format splits as parameters_by_format does: a bias's
			// bytes under its own dtype, so each quantized format's bytes are
			// its weights and scales alone. The bias tensors (BF16) are the
			// whole difference from the module's format.
			sum = 0
			for _, v := range s.BytesByFormat {
				sum += v
			}
			if sum != s.Bytes {
				t.Errorf("bytes_by_format sums to %d of %d", sum, s.Bytes)
			}
			var biasBytes, mxfp4Bytes uint64
			for _, te := range inv.Tensors {
				if te.Role == "bias" {
					biasBytes += te.DataOffsets[1] - te.DataOffsets[0]
				}
				if r.Formats[te.Module] == "mxfp4" && te.Role != "bias" {
					mxfp4Bytes += te.DataOffsets[1] - te.DataOffsets[0]
				}
			}
			if mxfp4Bytes > 0 {
				if s.BytesByFormat["mxfp4"] != mxfp4Bytes || biasBytes == 0 {
					t.Errorf("bytes_by_format[mxfp4] = %d, want the blocks and scales' %d (bias bytes %d apart)", s.BytesByFormat["mxfp4"], mxfp4Bytes, biasBytes)
				}
				if bpw := 8 * float64(s.BytesByFormat["mxfp4"]) / float64(s.ParamsByFormat["mxfp4"]); bpw != 4.25 {
					t.Errorf("mxfp4 bits per weight by the summary's tables %v, want 4.25", bpw)
				}
			}
			if r.ID != synth.Org+"/Llama-tiny-FP4-mislabeled" {
				for _, f := range inv.Findings {
					if f.Severity != scheme.SeverityInfo {
						t.Errorf("honest repo has finding %+v", f)
					}
				}
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Bits per weight of each format's weights, as users know them: NVFP4 4.5
// (4 + an 8-bit scale per 16), MXFP4 4.25 (per 32), FP8 just over 8, INT4 with
// 16-bit group-128 scales (and zeros, g_idx) a little over 4.125, INT3 in the
// 0.17 per-word layout 3.2 plus scales and zeros.
func TestBitsPerWeightOfQuantizedModules(t *testing.T) {
	bounds := map[string][2]float64{"nvfp4": {4.5, 4.51}, "mxfp4": {4.25, 4.25}, "fp8": {8, 8.1}, "int4": {4.125, 4.45}, "int3": {3.2, 3.5}, "int8": {8.1, 8.6}}
	for _, r := range synth.All() {
		c := load(t, r)
		for _, m := range c.Modules {
			if !m.Quantized {
				continue
			}
			bytes := m.Bytes
			if b, ok := m.Info("bias"); ok {
				bytes -= b.NBytes
			}
			bpw := 8 * float64(bytes) / float64(m.ParametersByFormat()[m.Format])
			if b := bounds[m.Format]; bpw < b[0] || bpw > b[1] {
				t.Errorf("%s %s (%s): %.4f bits per weight, outside %v", r.ID, m.Name, m.Layout, bpw, b)
			}
		}
	}
}

func TestMislabeledFindings(t *testing.T) {
	c := load(t, synth.Mislabeled())
	found := map[string][]scheme.Finding{}
	for _, f := range c.Findings {
		found[f.Rule] = append(found[f.Rule], f)
	}
	ex := found[RuleExcludedButQuantized]
	if len(ex) != 1 || ex[0].Module != "model.layers.0.self_attn.q_proj" || ex[0].Tensor != "model.layers.0.self_attn.q_proj.weight" || ex[0].Severity != scheme.SeverityError {
		t.Errorf("exclude finding %+v", ex)
	}
	if f := found[RuleIndexTotalSize]; len(f) != 1 || !strings.Contains(f[0].Message, "2.00×") {
		t.Errorf("index total_size finding %+v", f)
	}
	if f := found[RuleLabelVsBytes]; len(f) != 1 {
		t.Errorf("label finding %+v", f)
	}
	s2 := found[RuleScale2Inconsistent]
	if len(s2) != 2 || !strings.HasSuffix(s2[0].Tensor, "o_proj.weight_scale_2") {
		t.Errorf("weight_scale_2 findings %+v", s2)
	}
	if f := found[RuleDeclaredButDense]; len(f) != 6 {
		t.Errorf("declared-but-dense findings: %d", len(f))
	}
}

func writeRepo(t *testing.T, r *synth.Repo) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	if err := r.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestIndexFindings(t *testing.T) {
	r := synth.DeepSeekFP8()
	dir := writeRepo(t, r)
	idxPath := filepath.Join(dir, "model.safetensors.index.json")
	b, _ := os.ReadFile(idxPath)
	s := strings.Replace(string(b), `"model.norm.weight": "model-00002-of-00002.safetensors"`, `"model.norm.weight": "model-00001-of-00002.safetensors", "ghost.weight": "model-00001-of-00002.safetensors"`, 1)
	s = strings.Replace(s, `"lm_head.weight": "model-00002-of-00002.safetensors",`, ``, 1)
	if s == string(b) {
		t.Fatal("index edit did not apply")
	}
	os.WriteFile(idxPath, []byte(s), 0o644)
	c, err := Load(context.Background(), &hub.Dir{Root: dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := map[string]string{}
	for _, f := range c.Findings {
		got[f.Tensor] = f.Rule
	}
	if got["ghost.weight"] != RuleIndexMissingTensor || got["model.norm.weight"] != RuleIndexWrongShard || got["lm_head.weight"] != RuleIndexUnlistedTensor {
		t.Errorf("index findings %v", got)
	}
	// The Index keeps no names: ghost.weight's came from a second read of
	// the file. When that read fails, the finding still counts the entry.
	second := &failSecondRead{Source: &hub.Dir{Root: dir}, path: "model.safetensors.index.json"}
	c2, err := Load(context.Background(), second, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	var missing []scheme.Finding
	for _, f := range c2.Findings {
		if f.Rule == RuleIndexMissingTensor {
			missing = append(missing, f)
		}
	}
	if len(missing) != 1 || missing[0].Tensor != "" || !strings.Contains(missing[0].Message, "names 1 tensor(s) that no shard holds") || !strings.Contains(missing[0].Message, "second read refused") {
		t.Errorf("missing-tensor findings when the index cannot be read again: %+v", missing)
	}
	// An index naming a shard the repo lacks is an error, naming the shard.
	s = strings.Replace(string(b), `"model-00002-of-00002.safetensors"`, `"model-00003-of-00002.safetensors"`, 1)
	os.WriteFile(idxPath, []byte(s), 0o644)
	_, err = Load(context.Background(), &hub.Dir{Root: dir}, Options{})
	if err == nil || !strings.Contains(err.Error(), "model-00003-of-00002.safetensors") || !strings.Contains(err.Error(), "index-missing-shard") {
		t.Errorf("missing shard: %v", err)
	}
}

func TestBadShardIsAnError(t *testing.T) {
	dir := writeRepo(t, synth.CTW4A16())
	p := filepath.Join(dir, "model.safetensors")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, b[:len(b)-3], 0o644) // truncated: the data section is short
	_, err := Load(context.Background(), &hub.Dir{Root: dir}, Options{})
	var fe *safetensors.FormatError
	if !errors.As(err, &fe) || fe.Rule != safetensors.RuleFileSize || fe.File != "model.safetensors" {
		t.Fatalf("got %v", err)
	}
	os.WriteFile(p, []byte("not a safetensors file at all"), 0o644)
	if _, err := Load(context.Background(), &hub.Dir{Root: dir}, Options{}); !errors.As(err, &fe) {
		t.Fatalf("garbage: %v", err)
	}
	os.Remove(p)
	if _, err := Load(context.Background(), &hub.Dir{Root: dir}, Options{}); err == nil || !strings.Contains(err.Error(), "no-safetensors") {
		t.Fatalf("empty repo: %v", err)
	}
}

// The format card's 88-byte example is a valid one-file checkpoint.
func TestFormatCardFile(t *testing.T) {
	src := &hub.SingleFile{FilePath: filepath.Join("..", "safetensors", "testdata", "small-ct.safetensors")}
	c, err := Load(context.Background(), src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	inv := c.Inventory()
	if inv.Summary.Tensors != 1 || inv.Summary.Bytes != 8 || inv.Tensors[0].DType != "I32" || inv.Tensors[0].DataOffsets != [2]uint64{0, 8} {
		t.Fatalf("%+v", inv.Summary)
	}
}

// WriteJSON streams exactly what json.Marshal would write.
func TestWriteJSONMatchesMarshal(t *testing.T) {
	for _, r := range synth.All() {
		inv := load(t, r).Inventory()
		inv.Tensors[0].Name = "odd \"name\" <é>\n"
		want, err := json.Marshal(inv)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := inv.WriteJSON(&got); err != nil {
			t.Fatal(err)
		}
		if got.String() != string(want)+"\n" {
			t.Fatalf("WriteJSON differs from json.Marshal:\n%.300s\n%.300s", got.String(), want)
		}
	}
}

// InventoryStreamed writes tensors[] from the checkpoint: the document is
// json.Marshal's of the full Inventory, byte for byte, for every generated repo.
func TestInventoryStreamedMatchesMarshal(t *testing.T) {
	for _, r := range synth.All() {
		c := load(t, r)
		want, err := json.Marshal(c.Inventory())
		if err != nil {
			t.Fatal(err)
		}
		inv := c.InventoryStreamed()
		if inv.Tensors != nil {
			t.Fatalf("%s: InventoryStreamed built tensors[]", r.ID)
		}
		var got bytes.Buffer
		if err := inv.WriteJSON(&got); err != nil {
			t.Fatal(err)
		}
		if got.String() != string(want)+"\n" {
			t.Fatalf("%s: streamed WriteJSON differs from json.Marshal:\n%.300s\n%.300s", r.ID, got.String(), want)
		}
	}
}

// failSecondRead is a Source whose second ReadFile of path fails.
type failSecondRead struct {
	hub.Source
	path  string
	reads int
}

func (f *failSecondRead) ReadFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	if path == f.path {
		if f.reads++; f.reads > 1 {
			return nil, errors.New("second read refused")
		}
	}
	return f.Source.ReadFile(ctx, path, limit)
}
