package scheme

import (
	"bytes"
	"encoding/json"
)

// configGroupOrder lists the keys of config.json's
// quantization_config.FIELD (else compression_config's) in the order the
// file writes them, which a decoded map loses: for config_groups the order
// vLLM tries the groups' targets in, for GPT-QModel's dynamic the order its
// patterns are tried in. It returns nil when there is no such object or the
// file cannot be read (Detect reports that).
func configGroupOrder(configJSON []byte, field string) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(configJSON, &top) != nil {
		return nil
	}
	qc, ok := top["quantization_config"]
	if !ok {
		qc = top["compression_config"]
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(qc, &fields) != nil {
		return nil
	}
	return objectKeys(fields[field])
}

// objectKeys is the keys of a JSON object in document order (nil when raw
// is not an object).
func objectKeys(raw json.RawMessage) []string {
	d := json.NewDecoder(bytes.NewReader(raw))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var keys []string
	for d.More() {
		t, err := d.Token()
		k, ok := t.(string)
		if err != nil || !ok {
			return nil
		}
		var skip json.RawMessage
		if d.Decode(&skip) != nil {
			return nil
		}
		keys = append(keys, k)
	}
	return keys
}
