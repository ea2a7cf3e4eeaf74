//go:build unix

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

	// A relative link in a folder reached through a link is followed as
	// the kernel follows it: from the real folder.
	os.MkdirAll(filepath.Join(tmp, "real", "sub"), 0o755)
	os.Symlink(filepath.Join("real", "sub"), filepath.Join(tmp, "work"))
	os.Symlink(filepath.Join("..", "keep.f32"), filepath.Join(tmp, "real", "sub", "out.f32"))
	os.WriteFile(filepath.Join(tmp, "keep.f32"), []byte("UNRELATED"), 0o644)
	if _, stderr, code := runMain(t, "decode", "--out", filepath.Join(tmp, "work", "out.f32"), src, mod); code != 0 {
		t.Fatalf("decode --out through a linked folder: %s", stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(tmp, "keep.f32")); string(b) != "UNRELATED" {
		t.Error("a file the link does not name was overwritten")
	}
	if b, _ := os.ReadFile(filepath.Join(tmp, "real", "keep.f32")); !bytes.Equal(b, ref) {
		t.Errorf("the file the link names holds %d bytes", len(b))
	}

	// Two runs writing one --out at once: each writes a temporary file of
	// its own, so the file is one run's whole output, never a mix.
	other, _ := os.ReadFile(want) // up_proj's, from above
	down := filepath.Join(tmp, "down.f32")
	if _, stderr, code := runMain(t, "decode", "--out", down, src, "model.layers.0.mlp.down_proj"); code != 0 {
		t.Fatal(stderr)
	}
	downRef, _ := os.ReadFile(down)
	both := filepath.Join(tmp, "both.f32")
	for range 4 {
		done := make(chan int, 2)
		for _, m := range []string{mod, "model.layers.0.mlp.down_proj"} {
			go func() { _, _, code := runMain(t, "decode", "--out", both, src, m); done <- code }()
		}
		if a, b := <-done, <-done; a != 0 || b != 0 {
			t.Fatalf("concurrent runs: exit %d, %d", a, b)
		}
		if b, _ := os.ReadFile(both); !bytes.Equal(b, other) && !bytes.Equal(b, downRef) {
			t.Fatalf("two runs at once left %d bytes that are neither's output", len(b))
		}
	}

	// A new file gets the mode os.Create would give it: 0666 less the umask.
	old := syscall.Umask(0o077)
	_, stderr, code := runMain(t, "decode", "--out", filepath.Join(tmp, "private.f32"), src, mod)
	syscall.Umask(old)
	if fi, err := os.Stat(filepath.Join(tmp, "private.f32")); code != 0 || err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("a new file under umask 077: exit %d %s, %v %v", code, stderr, fi, err)
	}

	// A folder at --out is refused before any work.
	if _, stderr, code := runMain(t, "decode", "--out", tmp, src, mod); code != 1 || !strings.Contains(stderr, "--out "+tmp+": is a folder") {
		t.Errorf("--out FOLDER: exit %d, %q", code, stderr)
	}
}
