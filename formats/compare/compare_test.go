package compare

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/synth"
)

func loadDir(t *testing.T, dir string) *checkpoint.Checkpoint {
	t.Helper()
	c, err := checkpoint.Load(context.Background(), &hub.Dir{Root: dir}, checkpoint.Options{})
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func loadRepo(t *testing.T, r *synth.Repo) *checkpoint.Checkpoint {
	t.Helper()
	dir := filepath.Join(t.TempDir(), filepath.FromSlash(r.ID))
	if err := r.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	return loadDir(t, dir)
}

// The plain model of the test: a module's kind from its DeepSeek name, and
// its bytes from the producer's layout of the format it is stored in.
var layerNum = regexp.MustCompile(`^model\.layers\.(\d+)\.`)

func expectedKind(name string, layers int) string {
	if m := layerNum.FindStringSubmatch(name); m != nil {
		if l, _ := strconv.Atoi(m[1]); l >= layers {
			return "extra_layers"
		}
	}
	switch {
	case strings.Contains(name, ".mlp.experts."):
		return "routed_experts"
	case strings.Contains(name, ".mlp.shared_experts."):
		return "shared_experts"
	case strings.Contains(name, "norm"):
		return "norm"
	case strings.Contains(name, ".self_attn."):
		return "attention"
	case strings.Contains(name, ".mlp.gate_proj"), strings.Contains(name, ".mlp.up_proj"), strings.Contains(name, ".mlp.down_proj"):
		return "mlp"
	case strings.Contains(name, ".mlp.gate"):
		return "router"
	case name == "model.embed_tokens":
		return "embedding"
	case name == "lm_head":
		return "head"
	}
	return "other"
}

func storedBytes(format string, m synth.DeepSeekModule) uint64 {
	n := m.Params()
	switch format {
	case synth.StoreFP8:
		return n + 4*((m.Out+127)/128)*((m.In+127)/128)
	case synth.StoreNVFP4:
		return n/2 + n/16 + 8
	case synth.StoreF32:
		return 4 * n
	}
	return 2 * n
}

type sums struct {
	bytes, params map[string]uint64
	formats       map[string]map[string]uint64
	total, totalP uint64
	noExtra, noXP uint64
}

func expected(d synth.DeepSeekDims, store func(synth.DeepSeekModule) string) sums {
	s := sums{bytes: map[string]uint64{}, params: map[string]uint64{}, formats: map[string]map[string]uint64{}}
	for _, m := range d.Modules() {
		k, f := expectedKind(m.Name, d.Layers), store(m)
		b := storedBytes(f, m)
		s.bytes[k] += b
		s.params[k] += m.Params()
		if s.formats[k] == nil {
			s.formats[k] = map[string]uint64{}
		}
		s.formats[k][f] += b
		s.total += b
		s.totalP += m.Params()
		if k != "extra_layers" {
			s.noExtra += b
			s.noXP += m.Params()
		}
	}
	return s
}

// The mini DeepSeek-V3 pair (the same weights as DeepSeek's FP8 release and
// as ModelOpt's NVFP4 one): every kind's bytes, parameters and formats on
// both sides, the totals with and without the MTP layer, and the changed
// modules summarised by pattern, all as the layouts give them.
func TestDiffDeepSeekMini(t *testing.T) {
	d := synth.DeepSeekMini
	a, b := loadRepo(t, synth.DeepSeekMiniFP8()), loadRepo(t, synth.DeepSeekMiniNVFP4())
	got := New(FromCheckpoint(a), FromCheckpoint(b))
	ea, eb := expected(d, d.StoredFP8), expected(d, d.StoredNVFP4)
	if got.A.Bytes != ea.total || got.B.Bytes != eb.total || got.A.Parameters != ea.totalP || got.B.Parameters != eb.totalP {
		t.Errorf("totals A %+v B %+v, want bytes %d / %d, parameters %d", got.A, got.B, ea.total, eb.total, ea.totalP)
	}
	if got.A.Bytes != a.InventoryWithoutTensors().Summary.Bytes {
		t.Errorf("A's bytes %d, its inventory says %d", got.A.Bytes, a.InventoryWithoutTensors().Summary.Bytes)
	}
	if got.B.BytesWithoutExtra != eb.noExtra || got.B.ParametersWithoutExtra != eb.noXP ||
		got.B.BitsPerWeightWithoutExtra != 8*float64(eb.noExtra)/float64(eb.noXP) {
		t.Errorf("B without extra layers: %+v, want %d bytes, %d parameters", got.B, eb.noExtra, eb.noXP)
	}
	if got.A.BitsPerWeight != 8*float64(ea.total)/float64(ea.totalP) {
		t.Errorf("A bits/weight %v", got.A.BitsPerWeight)
	}
	wantKinds := []string{"routed_experts", "shared_experts", "attention", "mlp", "router", "embedding", "head", "norm", "extra_layers"}
	if len(got.Kinds) != len(wantKinds) {
		t.Fatalf("kinds %+v", got.Kinds)
	}
	for i, k := range got.Kinds {
		if k.Kind != wantKinds[i] {
			t.Errorf("kind %d is %s, want %s", i, k.Kind, wantKinds[i])
		}
		if k.ABytes != ea.bytes[k.Kind] || k.BBytes != eb.bytes[k.Kind] || k.AParameters != ea.params[k.Kind] || k.BParameters != eb.params[k.Kind] {
			t.Errorf("%s: A %d bytes %d params, B %d bytes %d params; want %d %d, %d %d", k.Kind, k.ABytes, k.AParameters, k.BBytes, k.BParameters,
				ea.bytes[k.Kind], ea.params[k.Kind], eb.bytes[k.Kind], eb.params[k.Kind])
		}
		if fmt.Sprint(k.AFormats) != fmt.Sprint(ea.formats[k.Kind]) || fmt.Sprint(k.BFormats) != fmt.Sprint(eb.formats[k.Kind]) {
			t.Errorf("%s formats: %v → %v, want %v → %v", k.Kind, k.AFormats, k.BFormats, ea.formats[k.Kind], eb.formats[k.Kind])
		}
	}
	// The changed modules: grouped by the test's own pattern (numbers as *).
	digits := regexp.MustCompile(`(^|\.)\d+(\.|$)`)
	pattern := func(n string) string {
		for digits.MatchString(n) {
			n = digits.ReplaceAllString(n, "${1}*${2}")
		}
		return n
	}
	want := map[string]int{}
	for _, m := range d.Modules() {
		if fa, fb := d.StoredFP8(m), d.StoredNVFP4(m); fa != fb {
			want[pattern(m.Name)+" "+fa+" "+fb]++
		}
	}
	gotC := map[string]int{}
	for _, c := range got.Changed {
		n := max(c.Count, 1)
		if c.Count == 0 && strings.Contains(c.Module, "*") || c.Count == 1 {
			t.Errorf("change %+v: a single module keeps its name and no count", c)
		}
		gotC[pattern(c.Module)+" "+c.AFormat+" "+c.BFormat] += n
	}
	if fmt.Sprint(gotC) != fmt.Sprint(want) {
		t.Errorf("changed:\n got %v\nwant %v", gotC, want)
	}
	if c := got.Changed[0]; c.Count != (d.Layers-d.DenseLayers)*d.Experts || c.AFormat != "fp8" || c.BFormat != "nvfp4" {
		t.Errorf("the largest group first: %+v", c)
	}
	// With few changes, each module is listed by name.
	small := New(Repo{Source: "a", Modules: a.Modules[:20]}, Repo{Source: "b", Modules: b.Modules[:20]})
	for _, c := range small.Changed {
		if c.Count != 0 || strings.Contains(c.Module, "*") {
			t.Errorf("few changes are listed one by one: %+v", c)
		}
	}
}

// A module only one side has is "absent" on the other; totals count what each has.
func TestDiffAbsent(t *testing.T) {
	mod := func(name, f string, b, p uint64) *scheme.Module {
		return &scheme.Module{Name: name, Format: f, Bytes: b, Parameters: p}
	}
	d := New(Repo{Source: "a", Modules: []*scheme.Module{mod("lm_head", "bf16", 8, 4), mod("model.layers.0.mlp.up_proj", "bf16", 8, 4)}},
		Repo{Source: "b", Modules: []*scheme.Module{mod("lm_head", "bf16", 8, 4), mod("model.layers.0.mlp.up_proj", "fp8", 4, 4), mod("model.layers.0.mlp.down_proj", "int4", 2, 4)}})
	want := []Change{{Module: "model.layers.0.mlp.down_proj", AFormat: Absent, BFormat: "int4"}, {Module: "model.layers.0.mlp.up_proj", AFormat: "bf16", BFormat: "fp8"}}
	if fmt.Sprint(d.Changed) != fmt.Sprint(want) {
		t.Errorf("changed %+v", d.Changed)
	}
	if d.A.Bytes != 16 || d.B.Bytes != 14 || d.B.Parameters != 12 || math.Abs(d.B.BitsPerWeight-8*14.0/12) > 1e-12 {
		t.Errorf("sides %+v %+v", d.A, d.B)
	}
}

// A summarised change keeps the numbers its members share: the MTP layer's
// experts are model.layers.61.mlp.experts.*.down_proj, not a * for the layer
// too; numbers that differ become *, and a change of one module keeps its name.
func TestSummariseKeepsSharedNumbers(t *testing.T) {
	var in []Change
	for e := range 4 {
		in = append(in, Change{Module: fmt.Sprintf("model.layers.61.mlp.experts.%d.down_proj", e), AFormat: "fp8", BFormat: "bf16"})
	}
	for l := range 3 {
		in = append(in, Change{Module: fmt.Sprintf("model.layers.%d.self_attn.q_a_proj", l), AFormat: "fp8", BFormat: "bf16"})
	}
	in = append(in, Change{Module: "model.layers.7.mlp.gate_proj", AFormat: "fp8", BFormat: "nvfp4"})
	got := summarise(in)
	want := []Change{
		{Module: "model.layers.61.mlp.experts.*.down_proj", AFormat: "fp8", BFormat: "bf16", Count: 4},
		{Module: "model.layers.*.self_attn.q_a_proj", AFormat: "fp8", BFormat: "bf16", Count: 3},
		{Module: "model.layers.7.mlp.gate_proj", AFormat: "fp8", BFormat: "nvfp4"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("summarise:\n got %+v\nwant %+v", got, want)
	}
}
