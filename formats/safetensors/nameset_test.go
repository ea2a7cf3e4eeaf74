package safetensors

import (
	"fmt"
	"testing"
)

// TestNameSetGrows: duplicates are found at any size, also after the table
// grew past the size it was made for.
func TestNameSetGrows(t *testing.T) {
	s := newNameSet(1)
	defer s.release()
	var ts []Tensor
	for i := range 3000 {
		ts = append(ts, Tensor{Name: fmt.Sprintf("t.%d", i)})
		if _, dup := s.add(ts, i); dup {
			t.Fatalf("%d reported as a duplicate", i)
		}
	}
	ts = append(ts, Tensor{Name: "t.1234"})
	if j, dup := s.add(ts, len(ts)-1); !dup || j != 1234 {
		t.Fatalf("duplicate of t.1234: %d, %v", j, dup)
	}
}
