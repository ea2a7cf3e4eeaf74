package main

import (
	"bytes"
	"io"
	"os"
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

	// A shard whose data breaks off: the decode fails part-way, and the
	// good file at --out is still there, whole.
	broken := filepath.Join(tmp, "broken")
	if err := os.CopyFS(broken, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	shard := filepath.Join(broken, "model.safetensors")
	st, _ := os.Stat(shard)
	os.Truncate(shard, st.Size()/2)
	for _, args := range [][]string{
		{"decode", "--out", want, broken, mod},
		{"decode", "--out", want, broken, mod + ".weight"},
	} {
		_, stderr, code := runMain(t, args...)
		if code != 1 || !strings.HasPrefix(stderr, "error: ") {
			t.Errorf("%v on a cut shard: exit %d, %q", args, code, stderr)
		}
		if b, _ := os.ReadFile(want); !bytes.Equal(b, ref) {
			t.Errorf("%v: the file at --out changed on failure (%d bytes)", args, len(b))
		}
		if _, err := os.Stat(want + ".partial"); !os.IsNotExist(err) {
			t.Errorf("%v left %s.partial: %v", args, want, err)
		}
	}

	// A folder at --out is refused before any work.
	if _, stderr, code := runMain(t, "decode", "--out", tmp, src, mod); code != 1 || !strings.Contains(stderr, "--out "+tmp+": is a folder") {
		t.Errorf("--out FOLDER: exit %d, %q", code, stderr)
	}
}
