package safetensors

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/ golden files")

// TestUpdateGolden rewrites testdata/small-ct.safetensors with -update.
func TestUpdateGolden(t *testing.T) {
	if !*update {
		return
	}
	data, err := Encode([]WriteTensor{{Name: "ct.weight_packed", DType: I32, Shape: []uint64{2, 1}, Data: cardData}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "small-ct.safetensors"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}
