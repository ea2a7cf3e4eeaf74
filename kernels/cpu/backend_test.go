package cpu

import (
	"strings"
	"testing"

	"github.com/quantscope/quantscope/kernels"
)

var _ kernels.Backend = (*Backend)(nil)

func TestName(t *testing.T) {
	b := &Backend{Workers: 3}
	if !strings.Contains(b.Name(), "3 cores") {
		t.Fatalf("Name() = %q, want the core count", b.Name())
	}
}
