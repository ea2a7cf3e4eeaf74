package synth

import (
	"bytes"
	"testing"

	"github.com/quantscope/quantscope/formats/safetensors"
)

// The same seed gives the same bytes, and every file the generator writes is
// a valid safetensors file.
func TestDeterministicAndValid(t *testing.T) {
	a, b := All(), All()
	if len(a) != 14 {
		t.Fatalf("%d repos", len(a))
	}
	for i := range a {
		if a[i].ID != b[i].ID || len(a[i].Files) != len(b[i].Files) {
			t.Fatalf("repo %d differs", i)
		}
		for p, data := range a[i].Files {
			if !bytes.Equal(data, b[i].Files[p]) {
				t.Fatalf("%s/%s differs between two runs", a[i].ID, p)
			}
			if len(p) > 12 && p[len(p)-12:] == ".safetensors" {
				if _, err := safetensors.Parse(p, data); err != nil {
					t.Fatalf("%s/%s: %v", a[i].ID, p, err)
				}
			}
		}
		if len(a[i].Weights) == 0 || len(a[i].Weights) != len(a[i].Formats) {
			t.Fatalf("%s: weights %d formats %d", a[i].ID, len(a[i].Weights), len(a[i].Formats))
		}
	}
}
