package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/quantscope/quantscope/synth"
)

// --out writes a regular file whole or not at all: a run that fails keeps
// what was at the name and leaves no .partial beside it. A device or named
// pipe at the name is written front to back in place and never removed (an
// earlier decode --out truncated it, then removed it on the error that
// followed: /dev/null went with it).
func TestOutFile(t *testing.T) {
	dir := demo(t)
	src := filepath.Join(dir, synth.Org, "Llama-tiny-NVFP4")
	const mod = "model.layers.0.mlp.up_proj"
	tmp := t.TempDir()

	want := filepath.Join(tmp, "values.f32")
	if _, stderr, code := runMain(t, "decode", "--out", want, src, mod); code != 0 {
		t.Fatalf("decode --out: %s", stderr)
	}
	ref, _ := os.ReadFile(want)
	if len(ref) != 768*256*4 {
		t.Fatalf("decode --out wrote %d bytes", len(ref))
	}

	// A named pipe gets the same bytes, in order, and is still a pipe.
	fifo := filepath.Join(tmp, "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	got := make(chan []byte)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- b
	}()
	if _, stderr, code := runMain(t, "decode", "--out", fifo, src, mod); code != 0 {
		t.Fatalf("decode --out FIFO: %s", stderr)
	}
	if b := <-got; !bytes.Equal(b, ref) {
		t.Errorf("the pipe read %d bytes, the file holds %d (equal: %v)", len(b), len(ref), bytes.Equal(b, ref))
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the pipe after decode: %v %v", fi, err)
	}

	// A write that fails part-way (the file-size limit of the shell's
	// ulimit -f, in 512-byte blocks: 100 kB of the 786 kB): the good file at
	// --out is still there, whole, and no .partial is left.
	for _, args := range [][]string{
		{"decode", "--out", want, src, mod},
		{"decode", "--out", want, src, mod + ".weight"},
	} {
		cmd := exec.Command("sh", "-c", `ulimit -f 200 && exec "$0" -test.run='^$'`, os.Args[0])
		cmd.Env = append(os.Environ(), "QUANTSCOPE_RUN_MAIN=1", "QUANTSCOPE_ARGS="+strings.Join(args, " "))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if err == nil || !strings.HasPrefix(stderr.String(), "error: --out "+want+": ") {
			t.Errorf("%v past the file-size limit: %v, %q", args, err, stderr.String())
		}
		if b, _ := os.ReadFile(want); !bytes.Equal(b, ref) {
			t.Errorf("%v: the file at --out changed on failure (%d bytes)", args, len(b))
		}
		if _, err := os.Stat(want + ".partial"); !os.IsNotExist(err) {
			t.Errorf("%v left %s.partial: %v", args, want, err)
		}
	}

	// Through a symbolic link the file it names is replaced, with its mode,
	// and the link stays a link.
	target, link := filepath.Join(tmp, "target.f32"), filepath.Join(tmp, "link.f32")
	os.WriteFile(target, []byte("old"), 0o600)
	os.Symlink("target.f32", link)
	if _, stderr, code := runMain(t, "decode", "--out", link, src, mod); code != 0 {
		t.Fatalf("decode --out LINK: %s", stderr)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link after decode: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(target); !bytes.Equal(b, ref) {
		t.Errorf("the link's file holds %d bytes", len(b))
	}
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o600 {
		t.Errorf("the replaced file's mode %v, was 0600", fi.Mode().Perm())
	}

	// A folder at --out is refused before any work.
	if _, stderr, code := runMain(t, "decode", "--out", tmp, src, mod); code != 1 || !strings.Contains(stderr, "--out "+tmp+": is a folder") {
		t.Errorf("--out FOLDER: exit %d, %q", code, stderr)
	}
}
