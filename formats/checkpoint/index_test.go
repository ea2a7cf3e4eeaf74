package checkpoint

import (
	"encoding/json"
	"maps"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestParseIndex(t *testing.T) {
	idx, wm := parseWeightMap(t, []byte(` {"metadata": {"total_size": 1234, "other": [1, {"a": "b"}]},
		"weight_map": {"a.weight": "model-00001-of-00002.safetensors", "b\u00e9": "model-00002-of-00002.safetensors"}} `))
	if idx == nil {
		t.Fatal("not read")
	}
	if *idx.TotalSize != 1234 || wm["bé"] != "model-00002-of-00002.safetensors" || idx.Len() != 2 {
		t.Fatalf("%+v", idx)
	}
	if p, ok := idx.Shard("bé"); !ok || p != "model-00002-of-00002.safetensors" {
		t.Fatalf("Shard(bé) = %q, %v", p, ok)
	}
	if _, ok := idx.Shard("b"); ok {
		t.Fatal("a name not in weight_map found")
	}
	for _, bad := range []string{
		``, `[]`, `{"weight_map": 3}`, `{"metadata": {}}`, `{"weight_map": {"a": 1}}`,
		`{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}`, `{"weight_map": {"a": "../x.safetensors"}}`,
		`{"weight_map": {"a": "/abs.safetensors"}}`, `{"weight_map": {}} x`, `{"metadata": {"total_size": -1}, "weight_map": {}}`,
		`{"metadata": {"total_size": "big"}, "weight_map": {}}`, `{"weight_map": {"a": "x"`,
	} {
		if _, err := parseIndex([]byte(bad)); err == nil || !strings.Contains(err.Error(), indexFile) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// FuzzIndex: the hand-written index reader agrees with encoding/json on
// every input both accept, and never panics.
func FuzzIndex(f *testing.F) {
	f.Add([]byte(`{"metadata":{"total_size":10},"weight_map":{"a":"model-00001-of-00001.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a\"b":"x.safetensors","c":"x.safetensors"},"extra":[true,null,1.5e3]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		idx, wm := parseWeightMap(t, b)
		if idx == nil {
			return
		}
		var ref struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if json.Unmarshal(b, &ref) == nil && !maps.Equal(ref.WeightMap, wm) {
			t.Fatalf("weight_map %v, encoding/json reads %v", wm, ref.WeightMap)
		}
		for name, file := range wm { // the table of hashes finds each entry's shard
			if p, ok := idx.Shard(name); !ok || p != file {
				t.Fatalf("Shard(%q) = %q, %v; weight_map says %q", name, p, ok, file)
			}
		}
	})
}

// parseWeightMap parses an index and collects its weight_map as the parser
// tells it (nil, nil when it refuses the file); a name told twice fails.
func parseWeightMap(t *testing.T, b []byte) (*Index, map[string]string) {
	wm := map[string]string{}
	idx, err := parseIndexEach(b, func(name, file string) {
		if _, dup := wm[name]; dup {
			t.Fatalf("%q told twice", name)
		}
		wm[name] = file
	})
	if err != nil {
		return nil, nil
	}
	if len(wm) != idx.Len() {
		t.Fatalf("%d entries told, Len %d", len(wm), idx.Len())
	}
	return idx, wm
}

// An index's memory follows its entries, not its commas: one entry and a
// metadata string of 4M commas after it (the parser's pre-size once counted
// every comma of the file, 750 MB for a 16 MB file) cost a few times the
// file's size, most of it the metadata string decoded.
func TestIndexCommasInStrings(t *testing.T) {
	junk := strings.Repeat(",", 4<<20)
	for _, doc := range []string{
		`{"weight_map": {"a.weight": "model.safetensors"}, "metadata": {"total_size": 8, "note": "` + junk + `"}}`,
		`{"weight_map": {"a.weight": "model.safetensors"}, "note": "` + junk + `"}`,
		`{"weight_map": {"a,` + junk + `": "model.safetensors"}}`,
	} {
		b := []byte(doc)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		idx, err := parseIndex(b)
		runtime.ReadMemStats(&after)
		if err != nil || idx.Len() != 1 {
			t.Fatalf("%.60s: %v", doc, err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*uint64(len(b)) {
			t.Errorf("%.60s: a %d-byte index allocated %d bytes", doc, len(b), alloc)
		}
	}
}

// Entries shorter than the pre-size assumes grow the arrays and the table
// as they come, every one still found.
func TestIndexShortEntries(t *testing.T) {
	wm := map[string]string{}
	for i := range 5000 {
		wm[strconv.Itoa(i)] = "s" + strconv.Itoa(i%3)
	}
	b, _ := json.Marshal(map[string]any{"weight_map": wm})
	idx, got := parseWeightMap(t, b)
	if idx == nil || !maps.Equal(got, wm) {
		t.Fatalf("%d entries read of %d", len(got), len(wm))
	}
	for name, file := range wm {
		if p, ok := idx.Shard(name); !ok || p != file {
			t.Fatalf("Shard(%q) = %q, %v; want %q", name, p, ok, file)
		}
	}
}
