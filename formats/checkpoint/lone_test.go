package checkpoint

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/synth"
)

// fp8File is one FP8 module with a weight_scale_inv of 2 under the given
// metadata: its decoded value tells whether the reader divided or multiplied.
func fp8File(t *testing.T, dir string, md map[string]string) string {
	t.Helper()
	w := make([]byte, 16*16)
	for i := range w {
		w[i] = 0x38 // 1.0
	}
	sc := make([]byte, 4)
	binary.LittleEndian.PutUint32(sc, math.Float32bits(2))
	b, err := safetensors.Encode([]safetensors.WriteTensor{
		{Name: "m.proj.weight", DType: safetensors.F8_E4M3, Shape: []uint64{16, 16}, Data: w},
		{Name: "m.proj.weight_scale_inv", DType: safetensors.F32, Shape: []uint64{}, Data: sc},
	}, md)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(dir, 0o755)
	p := filepath.Join(dir, "q.safetensors")
	os.WriteFile(p, b, 0o644)
	return p
}

func loadPath(t *testing.T, p string) (*Checkpoint, error) {
	src, err := hub.OpenLocal(p)
	if err != nil {
		t.Fatal(err)
	}
	return Load(context.Background(), src, Options{})
}

func TestLoneFileMetadataScheme(t *testing.T) {
	for scale, want := range map[string]float32{"inverse": 0.5, "multiplier": 2} {
		p := fp8File(t, filepath.Join(t.TempDir(), scale), map[string]string{
			scheme.MetaFormat: "fp8_e4m3", scheme.MetaNaming: "gptqmodel", scheme.MetaScale: scale})
		c, err := loadPath(t, p)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := c.Module("m.proj")
		v, err := scheme.Dequantize(m, c, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if c.Scheme.Method != "fp8" || c.Scheme.FP8Format != "e4m3" || v[0] != want {
			t.Fatalf("scale %s: scheme %+v, value %g, want %g", scale, c.Scheme, v[0], want)
		}
		c.Close()
	}
	// Without the metadata the file is read as before (no scheme).
	c, err := loadPath(t, fp8File(t, t.TempDir(), nil))
	if err != nil || c.Scheme.Method != "none" {
		t.Fatalf("plain file: %v %+v", err, c.Scheme)
	}
	c.Close()
	// A folder with a config keeps the config's scheme.
	dir := filepath.Join(t.TempDir(), "repo")
	fp8File(t, dir, map[string]string{scheme.MetaFormat: "fp8_e4m3", scheme.MetaNaming: "gptqmodel", scheme.MetaScale: "inverse"})
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"quantization_config":{"quant_method":"fp8","fmt":"e5m2"}}`), 0o644)
	c, err = loadPath(t, dir)
	if err != nil || c.Scheme.FP8Format != "e5m2" || c.Scheme.InverseFP8Scales {
		t.Fatalf("repo with config: %v %+v", err, c.Scheme)
	}
	c.Close()
	// The same file named on its own: it says what it is, and that wins
	// over the folder's config.
	c, err = loadPath(t, filepath.Join(dir, "q.safetensors"))
	if err != nil || c.Scheme.FP8Format != "e4m3" || !c.Scheme.InverseFP8Scales {
		t.Fatalf("a described file in a folder with a config: %v %+v", err, c.Scheme)
	}
	c.Close()
	// Metadata that says something wrong is an error naming the file and key.
	for key, md := range map[string]map[string]string{
		scheme.MetaScale:  {scheme.MetaFormat: "fp8_e4m3", scheme.MetaNaming: "gptqmodel", scheme.MetaScale: "sideways"},
		scheme.MetaNaming: {scheme.MetaFormat: "nvfp4", scheme.MetaNaming: "gptqmodel"},
		scheme.MetaFormat: {scheme.MetaFormat: "int3", scheme.MetaNaming: "modelopt"},
		scheme.MetaBlock:  {scheme.MetaFormat: "fp8_e4m3", scheme.MetaNaming: "modelopt", scheme.MetaScale: "direct", scheme.MetaBlock: "0,4"},
	} {
		_, err := loadPath(t, fp8File(t, t.TempDir(), md))
		if err == nil || !strings.Contains(err.Error(), "q.safetensors") || !strings.Contains(err.Error(), key) {
			t.Errorf("bad %s: %v", key, err)
		}
	}
}

// A shard named on its own is read with the config files beside it, as one
// file of a hub repo is: the GPT-QModel demo's down_proj is INT8 (a dynamic
// rule in config.json), which the file alone cannot say.
func TestShardReadWithFolderConfig(t *testing.T) {
	dir := t.TempDir()
	r := synth.GPTQDynamic()
	if err := r.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	c, err := loadPath(t, filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Scheme.Method != "gptq" || len(c.Scheme.Dynamic) != 2 {
		t.Fatalf("scheme %+v, want the folder's GPTQ config with its dynamic rules", c.Scheme)
	}
	m, ok := c.Module("model.layers.0.mlp.down_proj")
	if !ok || m.Format != "int8" || m.GroupSize != 64 {
		t.Fatalf("down_proj: %+v", m)
	}
	if fs := c.Findings; len(fs) != 0 {
		t.Errorf("findings: %+v", fs)
	}
}

// One file named on its own is read even when the config beside it cannot
// be (a Downloads folder's unrelated config.json): the config is set aside
// with a warning, and a file that describes itself keeps its own scheme.
func TestSiblingConfigUnreadable(t *testing.T) {
	dir := t.TempDir()
	p := fp8File(t, dir, map[string]string{scheme.MetaFormat: "fp8_e4m3", scheme.MetaNaming: "gptqmodel", scheme.MetaScale: "inverse"})
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"quantization_config":"x"}`), 0o644)
	c, err := loadPath(t, p)
	if err != nil {
		t.Fatalf("a file beside an unreadable config.json: %v", err)
	}
	defer c.Close()
	if c.Scheme.Method != "fp8" || !c.Scheme.InverseFP8Scales {
		t.Errorf("scheme %+v, want the file's own", c.Scheme)
	}
	if len(c.Findings) != 1 || c.Findings[0].Rule != RuleSiblingConfig || !strings.Contains(c.Findings[0].Message, "config.json") {
		t.Errorf("findings %+v, want one sibling-config warning", c.Findings)
	}
	// the folder itself still fails on it: its config is what runtimes read
	if _, err := loadPath(t, dir); err == nil {
		t.Error("a repo folder with an unreadable config.json loaded")
	}
}

// The last shard of a quantized repo may hold only its head and norms:
// read on its own it is no "nothing quantized" error.
func TestHeadOnlyShard(t *testing.T) {
	dir := t.TempDir()
	r := synth.GPTQDynamic()
	if err := r.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	w := make([]byte, 2*8*16)
	b, err := safetensors.Encode([]safetensors.WriteTensor{
		{Name: "lm_head.weight", DType: safetensors.BF16, Shape: []uint64{8, 16}, Data: w},
		{Name: "model.norm.weight", DType: safetensors.BF16, Shape: []uint64{16}, Data: w[:32]},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "model-00002-of-00002.safetensors")
	os.WriteFile(p, b, 0o644)
	c, err := loadPath(t, p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, f := range c.Findings {
		if f.Severity == scheme.SeverityError {
			t.Errorf("error finding on a head-only shard: %+v", f)
		}
	}
}
