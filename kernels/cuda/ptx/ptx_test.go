package ptx

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPTXCurrent fails when a .cu (or the header it includes) changed
// without its .ptx being regenerated: each .ptx records the SHA-256 of its
// source followed by every .cuh of the directory, as make ptx computes it.
func TestPTXCurrent(t *testing.T) {
	cus, _ := filepath.Glob("*.cu")
	if len(cus) != len(Modules) {
		t.Fatalf("%d .cu files, Modules lists %d", len(cus), len(Modules))
	}
	for _, cu := range cus {
		want := sourceHash(t, cu)
		p := strings.TrimSuffix(cu, ".cu") + ".ptx"
		f, err := os.Open(p)
		if err != nil {
			t.Fatalf("%s has no %s: run make ptx", cu, p)
		}
		line, _ := bufio.NewReader(f).ReadString('\n')
		f.Close()
		got := strings.TrimSpace(strings.TrimPrefix(line, SourceLine))
		if !strings.HasPrefix(line, SourceLine) || got != want {
			t.Errorf("%s was generated from another version of %s (recorded %q, source %s): run make ptx and commit the .ptx", p, cu, got, want)
		}
		if _, err := Load(strings.TrimSuffix(cu, ".cu")); err != nil {
			t.Error(err)
		}
	}
}

// sourceHash is sha256 over the .cu then each .cuh in name order: what
// `cat X.cu *.cuh | sha256sum` prints.
func sourceHash(t *testing.T, cu string) string {
	h := sha256.New()
	hs, _ := filepath.Glob("*.cuh")
	for _, p := range append([]string{cu}, hs...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}
