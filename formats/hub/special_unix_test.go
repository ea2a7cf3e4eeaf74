//go:build unix

package hub

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO where a shard, a config file or a cache's ref should be is
// refused at once with its path (before, opening it waited for a writer
// for ever, and cancelling did not help); /dev/zero as a ref is not read
// without end.
func TestSpecialFilesRefused(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"model.safetensors", "config.json"} {
		if err := syscall.Mkfifo(filepath.Join(dir, name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	within := func(what string, f func() error) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			t.Fatalf("%s blocked", what)
			return nil
		}
	}
	d := &Dir{Root: dir}
	err := within("opening a FIFO shard", func() error { _, _, err := d.Open(context.Background(), "model.safetensors"); return err })
	if err == nil || !strings.Contains(err.Error(), "not a regular file (a named pipe)") || !strings.Contains(err.Error(), "model.safetensors") {
		t.Errorf("a FIFO shard: %v", err)
	}
	err = within("reading a FIFO config.json", func() error { _, err := d.ReadFile(context.Background(), "config.json", 1<<20); return err })
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO config.json: %v", err)
	}

	hubDir := t.TempDir()
	const commit = "0123456789abcdef0123456789abcdef01234567"
	fakeCache(t, hubDir, "org/fifo", commit, nil, map[string]string{"model.safetensors": "x"})
	refs := filepath.Join(hubDir, "models--org--fifo", "refs")
	os.MkdirAll(refs, 0o755)
	if err := syscall.Mkfifo(filepath.Join(refs, "main"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(refs, "zero")); err != nil {
		t.Fatal(err)
	}
	for _, rev := range []string{"main", "zero"} {
		err := within("a ref that is "+rev, func() error { _, err := FindCached(hubDir, "org/fifo", rev, ""); return err })
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("refs/%s not a regular file: %v, want not in the cache (the hub is asked instead)", rev, err)
		}
	}
}
