package session

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/quantscope/quantscope/companion/localhub"
	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/scheme"
	"github.com/quantscope/quantscope/synth"
)

func serve(t *testing.T, repos ...*synth.Repo) (string, string) {
	t.Helper()
	dir := t.TempDir()
	for _, r := range repos {
		if err := r.WriteDir(filepath.Join(dir, filepath.FromSlash(r.ID))); err != nil {
			t.Fatal(err)
		}
	}
	h, err := localhub.New(dir, localhub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, dir
}

func TestOpenAndSample(t *testing.T) {
	r := synth.ModelOptNVFP4()
	url, _ := serve(t, r)
	var events []checkpoint.Progress
	s, err := Open(context.Background(), r.ID, Options{Endpoint: url, Progress: func(p checkpoint.Progress) { events = append(events, p) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, err := s.InventoryJSON(false)
	if err != nil {
		t.Fatal(err)
	}
	var inv struct {
		Summary struct {
			Parameters uint64
			Tensors    int
		}
		Fetch   struct{ Requests int }
		Tensors []any
	}
	if err := json.Unmarshal(b, &inv); err != nil || inv.Summary.Parameters == 0 || inv.Fetch.Requests == 0 || inv.Tensors != nil {
		t.Fatalf("inventory: %v %+v", err, inv)
	}
	tb, _ := s.TensorsJSON()
	var all []map[string]any
	json.Unmarshal(tb, &all)
	mb, _ := s.ModuleTensorsJSON("model.layers.0.mlp.up_proj")
	var one []map[string]any
	json.Unmarshal(mb, &one)
	if len(all) != inv.Summary.Tensors || len(one) != 4 || one[0]["module"] != "model.layers.0.mlp.up_proj" {
		t.Fatalf("tensors %d of %d, module tensors %v", len(all), inv.Summary.Tensors, one)
	}
	if _, err := s.ModuleTensorsJSON("nope"); err == nil {
		t.Fatal("unknown module accepted")
	}
	if len(events) != 1 || events[0].ShardsDone != 1 {
		t.Fatalf("progress %+v", events)
	}
	name := "model.layers.1.mlp.down_proj"
	v, err := s.Sample(name, 10, 4)
	if err != nil {
		t.Fatal(err)
	}
	if v.Rows != 4 || v.Cols != 768 || v.ColEnd != 768 || v.CodeKind != "e2m1" || len(v.Codes) != 16 || len(v.Scales) != 4*48 {
		t.Fatalf("sample %d×%d %s %d codes %d scales", v.Rows, v.Cols, v.CodeKind, len(v.Codes), len(v.Scales))
	}
	total := 0
	for _, c := range v.Histogram.Counts {
		total += c
	}
	if total != 4*768 || v.Stats.Max < v.Stats.Min || !v.ScaleHistogram.Log2 {
		t.Fatalf("histogram %d, stats %+v", total, v.Stats)
	}
	orig := r.Weights[name]
	for i := range 768 {
		d := v.Values[i] - orig.Data[10*768+i]
		if d > 0.1 || d < -0.1 {
			t.Fatalf("value %d: %v vs %v", i, v.Values[i], orig.Data[10*768+i])
		}
	}
	// Bounds: rows are clamped to the limit, and a start past the end is an error.
	if v, err := s.Sample(name, 0, 1000); err != nil || v.Rows != MaxSampleRows {
		t.Fatalf("clamp: %v", err)
	}
	if _, err := s.Sample(name, 256, 1); err == nil {
		t.Fatal("row past the end accepted")
	}
	if _, err := s.Sample("nope", 0, 1); err == nil {
		t.Fatal("unknown module accepted")
	}
}

// A shard lost mid-way leaves the rest of the inventory in place.
func TestPartialInventory(t *testing.T) {
	r := synth.DeepSeekFP8()
	url, dir := serve(t, r)
	os.Remove(filepath.Join(dir, filepath.FromSlash(r.ID), "model-00002-of-00002.safetensors"))
	os.WriteFile(filepath.Join(dir, filepath.FromSlash(r.ID), "model-00002-of-00002.safetensors"), []byte("short"), 0o644)
	s, err := Open(context.Background(), r.ID, Options{Endpoint: url})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, _ := s.InventoryJSON(true)
	if !strings.Contains(string(b), "shard-unreadable") || !strings.Contains(string(b), "model.layers.0.self_attn.q_a_proj") {
		t.Fatalf("partial inventory lacks the finding or the good shard: %.300s", b)
	}
}

func TestOpenErrors(t *testing.T) {
	url, _ := serve(t)
	for _, src := range []string{"org/none", "not a source", "https://elsewhere.example/page.html"} {
		if _, err := Open(context.Background(), src, Options{Endpoint: url}); err == nil {
			t.Errorf("%q opened", src)
		}
	}
}

func TestClassify(t *testing.T) {
	url, dir := serve(t, synth.AWQInt4())
	os.WriteFile(filepath.Join(dir, synth.Org, "Llama-tiny-AWQ", localhub.GatedFile), []byte("tok\n"), 0o644)
	_, err := Open(context.Background(), synth.Org+"/Llama-tiny-AWQ", Options{Endpoint: url})
	if info := Classify(err); info.Kind != "auth" || info.Status != 401 {
		t.Errorf("gated: %+v", info)
	}
	if _, err := Open(context.Background(), synth.Org+"/Llama-tiny-AWQ", Options{Endpoint: url, Token: "tok"}); err != nil {
		t.Errorf("with token: %v", err)
	}
	_, err = Open(context.Background(), "org/missing", Options{Endpoint: url})
	if info := Classify(err); info.Kind != "not-found" {
		t.Errorf("missing: %+v", info)
	}
	bad := filepath.Join(dir, "org", "broken")
	os.MkdirAll(bad, 0o755)
	os.WriteFile(filepath.Join(bad, "model.safetensors"), []byte("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":3}         "), 0o644)
	_, err = Open(context.Background(), "org/broken", Options{Endpoint: url})
	if info := Classify(err); info.Kind != "format" || info.Rule != "tensor-entry" || info.Tensor != "a" || info.File != "model.safetensors" {
		t.Errorf("broken: %+v (%v)", info, err)
	}
	empty := filepath.Join(dir, "org", "empty")
	os.MkdirAll(empty, 0o755)
	os.WriteFile(filepath.Join(empty, "README.md"), []byte("hi"), 0o644)
	_, err = Open(context.Background(), "org/empty", Options{Endpoint: url})
	if info := Classify(err); info.Kind != "not-safetensors" {
		t.Errorf("empty: %+v", info)
	}
	_, err = Open(context.Background(), "org/x", Options{Endpoint: "http://127.0.0.1:1"})
	if info := Classify(err); info.Kind != "network" {
		t.Errorf("refused: %+v", info)
	}
}

// The sample's histogram of a module whose values are all one huge number
// (or span float32's whole range) bins every finite value, where Lo + 1 once
// equalled Lo and a NaN bin index panicked.
func TestHistogramExtremes(t *testing.T) {
	for _, v := range [][]float32{
		{1e20, 1e20, 1e20},
		{1e16},
		{-3e38, -3e38},
		{-3.4e38, 3.4e38, 0},
		{1, float32(math.NaN()), float32(math.Inf(1))},
	} {
		h := histogram(v, scheme.ValueStats(v), 8)
		n := 0
		for _, c := range h.Counts {
			n += c
		}
		finite := 0
		for _, x := range v {
			if !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) {
				finite++
			}
		}
		if n != finite || !(h.Hi > h.Lo) {
			t.Errorf("%v: %d of %d finite values binned, range [%g, %g]", v, n, finite, h.Lo, h.Hi)
		}
	}
}

// With TokenHosts given, the token goes to those hosts and Hugging Face's
// only: a hub that just the SOURCE names gets no Authorization, and the
// error says the token was held back.
func TestTokenHosts(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, c := range []struct {
		hosts []string
		want  string
	}{{[]string{"127.0.0.1:1"}, ""}, {[]string{host}, "Bearer hf_x"}, {nil, "Bearer hf_x"}} {
		_, err := Open(context.Background(), srv.URL+"/org/name/tree/main", Options{Token: "hf_x", TokenHosts: c.hosts})
		mu.Lock()
		got := auth
		auth = nil
		mu.Unlock()
		if err == nil || len(got) == 0 {
			t.Fatalf("hosts %v: %v after %d requests", c.hosts, err, len(got))
		}
		for _, a := range got {
			if a != c.want {
				t.Errorf("hosts %v: sent %q, want %q", c.hosts, a, c.want)
			}
		}
		if held := strings.Contains(err.Error(), "the token was not sent to "+host); held != (c.want == "") {
			t.Errorf("hosts %v: %v", c.hosts, err)
		}
	}
}
