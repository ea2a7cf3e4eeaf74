package session

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/quantscope/quantscope/formats/compare"
	"github.com/quantscope/quantscope/synth"
)

// The page's comparison is compare.New of the two remote repos, as diff
// --json prints it; a repo that cannot be opened is the error it was.
func TestCompare(t *testing.T) {
	a, b := synth.DeepSeekMiniFP8(), synth.DeepSeekMiniNVFP4()
	url, _ := serve(t, a, b)
	s, err := Open(context.Background(), a.ID, Options{Endpoint: url})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	js, err := s.Compare(context.Background(), b.ID, Options{Endpoint: url})
	if err != nil {
		t.Fatal(err)
	}
	var d compare.Diff
	if err := json.Unmarshal(js, &d); err != nil {
		t.Fatal(err)
	}
	other, err := Open(context.Background(), b.ID, Options{Endpoint: url})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	want, _ := json.Marshal(compare.New(compare.FromCheckpoint(s.ck), compare.FromCheckpoint(other.ck)))
	if string(js) != string(want) {
		t.Errorf("compare JSON differs from compare.New:\n%.300s\n%.300s", js, want)
	}
	if d.A.Source != a.ID+"@main" && d.A.Source != a.ID || d.B.Bytes == 0 || len(d.Kinds) == 0 || d.Kinds[0].Kind != "routed_experts" {
		t.Errorf("diff %+v", d.A)
	}
	if _, err := s.Compare(context.Background(), synth.Org+"/no-such-repo", Options{Endpoint: url}); err == nil || Classify(err).Kind != "not-found" {
		t.Errorf("a missing repo: %v (%+v)", err, Classify(err))
	}
}
