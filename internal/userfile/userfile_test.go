package userfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A regular file is read whole; one over the bound, a directory and an
// endless device are refused at once, each with its path and reason.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "data.txt")
	want := bytes.Repeat([]byte("1 2 3\n"), 1000)
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Read(p, int64(len(want)))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Read at the bound: %d bytes, %v; want the file's %d", len(got), err, len(want))
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	if got, err := Read(empty, 0); err != nil || len(got) != 0 {
		t.Errorf("Read of an empty file: %q, %v", got, err)
	}
	if _, err := Read(p, int64(len(want))-1); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), p) {
		t.Errorf("Read one byte over the bound: %v, want ErrTooLarge naming %s", err, p)
	}
	if _, err := Read(dir, 1<<20); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "a directory") {
		t.Errorf("Read of a directory: %v", err)
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		if _, err := Read("/dev/zero", 1<<20); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "a device") {
			t.Errorf("Read of /dev/zero: %v", err)
		}
	}
}
