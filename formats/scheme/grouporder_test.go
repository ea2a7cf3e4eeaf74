package scheme

import (
	"slices"
	"testing"
)

func TestConfigGroupOrder(t *testing.T) {
	for _, c := range []struct {
		json string
		want []string
	}{
		{`{"quantization_config":{"config_groups":{"group_2":{},"group_10":{"targets":["Linear"]},"a":1}}}`, []string{"group_2", "group_10", "a"}},
		{`{"compression_config":{"config_groups":{"z":{},"y":{}}}}`, []string{"z", "y"}},
		{`{"quantization_config":{"config_groups":{"q":{}}},"compression_config":{"config_groups":{"c":{}}}}`, []string{"q"}},
		{`{"quantization_config":{"config_groups":[1,2]}}`, nil},
		{`{"quantization_config":{}}`, nil},
		{`{"quantization_config":`, nil},
		{`[]`, nil},
	} {
		if got := configGroupOrder([]byte(c.json), "config_groups"); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.json, got, c.want)
		}
	}
	s, err := Detect([]byte(`{"quantization_config":{"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":{
		"group_2":{"targets":["re:.*down_proj"],"weights":{"num_bits":8,"type":"int","symmetric":true,"strategy":"channel"}},
		"group_10":{"targets":["Linear"],"weights":{"num_bits":4,"type":"int","symmetric":true,"strategy":"group","group_size":128}}}}}`), nil)
	if err != nil || len(s.Groups) != 2 || s.Groups[0].Name != "group_2" || s.Groups[1].Name != "group_10" {
		t.Fatalf("groups in file order: %v %+v", err, s)
	}
}
