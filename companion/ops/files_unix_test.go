//go:build unix

package ops

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The files a job names on the companion's machine: an endless device or
// a FIFO is refused at once (before, /dev/zero was read until memory ran
// out, and a FIFO held the job and its slot for ever, cancel or not); a
// file that is not token ids is refused without its content in the error
// (the client may name any file, such as a saved hub token).
func TestJobFilesRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "token")
	os.WriteFile(secret, []byte("hf_ThisIsASecret\n"), 0o600)
	for _, c := range []struct {
		p    EvalParams
		want string
	}{
		{EvalParams{DataFile: "/dev/zero"}, "not a regular file (a device)"},
		{EvalParams{TextFile: fifo}, "not a regular file (a named pipe)"},
		{EvalParams{DataFile: secret}, "line 1: field 1 is not a token id"},
	} {
		done := make(chan error, 1)
		go func() { _, _, err := evalData(context.Background(), Env{}, c.p); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%+v: %v, want %q", c.p, err, c.want)
			}
			if err != nil && strings.Contains(err.Error(), "hf_") {
				t.Errorf("%+v: the error shows the file's content: %v", c.p, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%+v: blocked", c.p)
		}
	}
	for _, p := range []string{"/dev/zero", fifo} {
		done := make(chan error, 1)
		go func() { _, err := ReadActivations(p, "", 16); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("activations %s: %v", p, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("activations %s: blocked", p)
		}
	}
}
