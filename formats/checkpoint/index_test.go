package checkpoint

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
)

func TestParseIndex(t *testing.T) {
	idx, err := parseIndex([]byte(` {"metadata": {"total_size": 1234, "other": [1, {"a": "b"}]},
		"weight_map": {"a.weight": "model-00001-of-00002.safetensors", "b\u00e9": "model-00002-of-00002.safetensors"}} `))
	if err != nil {
		t.Fatal(err)
	}
	if *idx.TotalSize != 1234 || idx.WeightMap()["bé"] != "model-00002-of-00002.safetensors" || idx.Len() != 2 {
		t.Fatalf("%+v", idx)
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
		idx, err := parseIndex(b)
		if err != nil {
			return
		}
		var ref struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if json.Unmarshal(b, &ref) == nil && !maps.Equal(ref.WeightMap, idx.WeightMap()) {
			t.Fatalf("weight_map %v, encoding/json reads %v", idx.WeightMap(), ref.WeightMap)
		}
	})
}
