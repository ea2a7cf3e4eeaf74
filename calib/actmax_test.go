package calib

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/model"
)

func TestActMax(t *testing.T) {
	m, _ := loadLlama(t, "gptq")
	d := dataFile(t, 17, 23)
	ctx := context.Background()
	all := model.Producers(2)
	if len(all) != 9 {
		t.Fatalf("%d producers for 2 layers, want 9", len(all))
	}
	index := map[string]int{}
	for i, p := range all {
		index[p] = i
	}
	var observed, reported int
	hooks := ActMaxHooks{
		Observed: func(p string, frozen []string) {
			observed++
			if strings.Join(frozen, ",") != strings.Join(all[:index[p]], ",") {
				t.Errorf("%s observed with %v frozen, want %v", p, frozen, all[:index[p]])
			}
		},
		Frozen: func(p string, frozen []string) {
			reported++
			if strings.Join(frozen, ",") != strings.Join(all[:index[p]+1], ",") {
				t.Errorf("%s reported with %v frozen", p, frozen)
			}
		},
	}
	for _, recipe := range []string{kernels.ActLeastSquares, kernels.ActNvidia} {
		observed, reported = 0, 0
		rep, err := ActMax(ctx, m, d, Options{Recipe: recipe}, hooks)
		if err != nil {
			t.Fatal(err)
		}
		if observed != 18 || reported != 9 {
			t.Fatalf("%d observations, %d freezes; want 18 and 9", observed, reported)
		}
		// The plain check: each producer's amax from full forwards of each
		// sequence with exactly the earlier producers' scales set (later
		// scales cannot reach an earlier value), the scale from the formula.
		den := float32(448 * 4)
		if recipe == kernels.ActNvidia {
			den = 448 * 6
		}
		frozen := map[string]float32{}
		for k, b := range rep.Boundaries {
			if b.Name != all[k] || b.Tokens != 40 || b.Samples != 2 {
				t.Fatalf("boundary %d: %+v, want %s with tokens 40, samples 2", k, b, all[k])
			}
			var amax float32
			for _, seq := range d.Seqs {
				_, err := m.Forward(ctx, seq, model.Options{W4A: model.W4ANVFP4, Recipe: recipe, Scales: frozen, Observe: func(p string, x kernels.Matrix) error {
					if p == b.Name {
						amax = max(amax, absMax(x.Data))
					}
					return nil
				}})
				if err != nil {
					t.Fatal(err)
				}
			}
			if amax != b.Amax || b.GlobalScale != amax/den || amax == 0 {
				t.Fatalf("%s %s: amax %v scale %v; plain amax %v scale %v", recipe, b.Name, b.Amax, b.GlobalScale, amax, amax/den)
			}
			frozen[b.Name] = b.GlobalScale
		}
		// The calibrated scales do reach later producers: the second layer's
		// down_proj input differs from the uncalibrated stream's.
		var dyn float32
		for _, seq := range d.Seqs {
			m.Forward(ctx, seq, model.Options{W4A: model.W4ANVFP4, Recipe: recipe, Observe: func(p string, x kernels.Matrix) error {
				if p == "model.layers.1.mlp.down_proj.input" {
					dyn = max(dyn, absMax(x.Data))
				}
				return nil
			}})
		}
		if dyn == rep.Boundaries[7].Amax {
			t.Errorf("%s: layer 1's down_proj.input amax %v is the uncalibrated stream's", recipe, dyn)
		}
	}
}

func TestActMaxReportJSON(t *testing.T) {
	m, _ := loadLlama(t, "gptq")
	d := dataFile(t, 5, 6)
	rep, err := ActMax(context.Background(), m, d, Options{}, ActMaxHooks{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	// keys in order, exactly GPT-QModel's, then "data"
	want := `{"algorithm":"producer_maximum","recipe":"least_squares","global_scales":{"model.layers.0.input":`
	if !strings.HasPrefix(string(b), want) {
		t.Fatalf("report starts %.120s", b)
	}
	for _, k := range []string{`"boundaries":{"model.layers.0.input":{"amax":`, `"upstream_activations":"calibrated_encoded_carriers","weight_updates":0,"data":{"path":`} {
		if !strings.Contains(string(b), k) {
			t.Fatalf("report lacks %s: %s", k, b)
		}
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	gs := string(b[strings.Index(string(b), `"global_scales"`):strings.Index(string(b), `"boundaries"`)])
	last := -1
	for _, p := range model.Producers(2) {
		i := strings.Index(gs, `"`+p+`"`)
		if i <= last {
			t.Fatalf("global_scales out of calibration order at %s: %s", p, gs)
		}
		last = i
	}
	// read back as --scales; the overlap rule
	path := filepath.Join(t.TempDir(), "scales.json")
	os.WriteFile(path, b, 0o644)
	sf, err := ReadScales(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(sf.Scales) != 9 || sf.Scales["model.layers.1.output"] != rep.Boundaries[8].GlobalScale || sf.Recipe != "least_squares" {
		t.Fatalf("read back %+v", sf)
	}
	if err := sf.CheckOverlap(d, false); err == nil || !strings.Contains(err.Error(), "calibration-overlap") {
		t.Fatalf("same file: %v", err)
	}
	if err := sf.CheckOverlap(d, true); err != nil {
		t.Fatal(err)
	}
	if err := sf.CheckOverlap(dataFile(t, 5, 7), false); err != nil {
		t.Fatalf("other data refused: %v", err)
	}
	if _, err := m.Forward(context.Background(), d.Seqs[0], model.Options{W4A: model.W4ANVFP4, Scales: sf.Scales}); err != nil {
		t.Fatal(err)
	}
}

// Under the mixed policy (FP8 attention, NVFP4 MLP) act_max calibrates the
// MLP's producers alone, in order, each observed in the mixed stream with
// the earlier ones frozen: the same plain check, forwards under that
// policy; and the report says so.
func TestActMaxMixedPolicy(t *testing.T) {
	ctx := context.Background()
	m, _ := loadLlama(t, "gptq")
	d := dataFile(t, 17, 23)
	rep, err := ActMax(ctx, m, d, Options{Attention: model.W4AFP8}, ActMaxHooks{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"model.layers.0.post_attention_residual", "model.layers.0.mlp.down_proj.input", "model.layers.1.post_attention_residual", "model.layers.1.mlp.down_proj.input"}
	frozen := map[string]float32{}
	for k, b := range rep.Boundaries {
		if k >= len(want) || b.Name != want[k] {
			t.Fatalf("boundary %d: %s, want %v", k, b.Name, want)
		}
		var amax float32
		for _, seq := range d.Seqs {
			_, err := m.Forward(ctx, seq, model.Options{W4A: model.W4ANVFP4, Attention: model.W4AFP8, Scales: frozen, Observe: func(p string, x kernels.Matrix) error {
				if p == b.Name {
					amax = max(amax, absMax(x.Data))
				}
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
		}
		if amax != b.Amax || b.GlobalScale != amax/(448*4) {
			t.Fatalf("%s: amax %v scale %v; plain amax %v", b.Name, b.Amax, b.GlobalScale, amax)
		}
		frozen[b.Name] = b.GlobalScale
	}
	if len(rep.Boundaries) != len(want) {
		t.Fatalf("%d boundaries, want %d", len(rep.Boundaries), len(want))
	}
	if b, _ := json.Marshal(rep); !strings.Contains(string(b), `"weight_updates":0,"attention":"fp8"`) {
		t.Errorf("report: %s", b)
	}
	if err := m.CheckScales(model.Options{W4A: model.W4ANVFP4, Attention: model.W4AFP8, Scales: rep.Scales()}); err != nil {
		t.Errorf("the mixed report's scales under the mixed policy: %v", err)
	}
}
