//go:build unix

package userfile

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO with no writer is refused at once: neither the open nor the read
// waits for a writer that never comes.
func TestReadFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Read(fifo, 1<<20); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "a named pipe") || !strings.Contains(err.Error(), fifo) {
			t.Errorf("Read of a FIFO: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read of a FIFO with no writer blocked")
	}
}
