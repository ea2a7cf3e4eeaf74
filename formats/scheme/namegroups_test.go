package scheme

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// deepSeekR1FP4Excludes is the shape of nvidia/DeepSeek-R1-FP4's 245
// exclude_modules: per layer its attention and layernorms, the router of
// the 58 MoE layers, then the model-level entries.
func deepSeekR1FP4Excludes() []string {
	var out []string
	for i := range 61 {
		out = append(out, fmt.Sprintf("model.layers.%d.self_attn*", i))
		if i >= 3 {
			out = append(out, fmt.Sprintf("model.layers.%d.mlp.gate", i))
		}
		out = append(out, fmt.Sprintf("model.layers.%d.input_layernorm", i), fmt.Sprintf("model.layers.%d.post_attention_layernorm", i))
	}
	return append(out, "model.norm", "model.embed_tokens", "lm_head", "model.layers.61*")
}

func TestGroupNames(t *testing.T) {
	ex := deepSeekR1FP4Excludes()
	if len(ex) != 245 {
		t.Fatalf("%d entries", len(ex))
	}
	got := GroupNames(ex)
	want := []NameGroup{
		{"model.layers.N.self_attn*", 61, "0–60"},
		{"model.layers.N.input_layernorm", 61, "0–60"},
		{"model.layers.N.post_attention_layernorm", 61, "0–60"},
		{"model.layers.N.mlp.gate", 58, "3–60"},
		{"model.norm", 1, ""},
		{"model.embed_tokens", 1, ""},
		{"lm_head", 1, ""},
		{"model.layers.61*", 1, ""},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
	n := 0
	for _, g := range got {
		n += g.Count
	}
	if n != len(ex) {
		t.Errorf("groups count %d entries of %d", n, len(ex))
	}
	if s := got[3].String(); s != "model.layers.N.mlp.gate (N in 3–60: 58)" {
		t.Errorf("String: %q", s)
	}
	// Gaps and duplicates in the numbers, one-layer entries written as they
	// are, a leading number segment, "re:" patterns untouched.
	got = GroupNames([]string{"h.0.attn", "h.2.attn", "h.3.attn", "h.3.attn", "h.7.attn", "h.5.mlp", "0.x", "1.x", "re:.*\\.1\\.mlp", "layers.01.x"})
	want = []NameGroup{
		{"h.N.attn", 5, "0, 2–3, 7"},
		{"h.5.mlp", 1, ""},
		{"N.x", 2, "0–1"},
		{"re:.*\\.1\\.mlp", 1, ""},
		{"layers.01.x", 1, ""},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
}

// The scheme's JSON keeps its fields and adds the grouped lists.
func TestSchemeJSONSummary(t *testing.T) {
	s := &Scheme{Method: "modelopt", Family: FamilyNVFP4, ExcludeModules: deepSeekR1FP4Excludes(), Ignore: []string{"lm_head"}}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Method         string      `json:"method"`
		ExcludeModules []string    `json:"exclude_modules"`
		ExcludeSummary []NameGroup `json:"exclude_summary"`
		IgnoreSummary  []NameGroup `json:"ignore_summary"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Method != "modelopt" || len(doc.ExcludeModules) != 245 || len(doc.ExcludeSummary) != 8 || len(doc.IgnoreSummary) != 1 {
		t.Fatalf("%s", b[:200])
	}
	if b, _ := json.Marshal(&Scheme{Method: "none"}); strings.Contains(string(b), "summary") {
		t.Errorf("an empty list gets a summary: %s", b)
	}
}

// A one-entry group shows its number where it was, not in the first "N"
// segment, and entries whose numbers sit in different segments do not merge.
func TestGroupNamesKeepsTheNumbersSegment(t *testing.T) {
	got := GroupNames([]string{"model.N.mlp.3", "x.1.N", "x.N.1", "a.N.2", "a.N.5"})
	want := []NameGroup{
		{"model.N.mlp.3", 1, ""},
		{"x.1.N", 1, ""},
		{"x.N.1", 1, ""},
		{"a.N.N", 2, "2, 5"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
}
