package main

import (
	"errors"
	"fmt"
	"github.com/quantscope/quantscope/internal/userfile"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// outFile is the file a command writes its result to (--out).
//
//   - A regular file, or a new one, is written to a temporary file of its
//     own beside it (NAME.partial…, unique, so two runs never share one) and
//     renamed over it once whole: a run that fails leaves what was there and
//     no half file under the name asked for. Through symbolic links it is the
//     file they name that is replaced, with its mode.
//   - /dev/stdout, /dev/stderr, /dev/fd/N and /proc/self/fd/N are the
//     descriptors this process inherited: written through them as they are
//     (a file opened for appending keeps what it held), never reopened.
//   - Any other file that is not a regular one (a device such as /dev/null,
//     a named pipe) is written in place, front to back, never removed.
//   - A regular file in a folder this user may not create files in (or, in
//     a sticky folder, replace them) is written in place, as a shell's > does.
type outFile struct {
	path   string // as the user gave it
	f      *os.File
	tmp    string // the temporary file, "" when written in place
	target string // what tmp is renamed to: path, or the file its links name
}

// checkOut refuses an --out path that cannot be written before any work is
// done: its folder must exist, and it must not be a folder itself.
func checkOut(path string) error {
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		why := "is not a folder"
		if errors.Is(err, os.ErrNotExist) {
			why = "does not exist"
		} else if err != nil {
			why = "cannot be used: " + err.Error()
		}
		return fmt.Errorf("--out %s: its folder %s %s", path, dir, why)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("--out %s: is a folder; give a file's name", path)
	}
	return nil
}

// inheritedFD is the descriptor a path names when it is one this process
// inherited (/dev/stdout, /dev/fd/1, /proc/self/fd/1), else -1.
func inheritedFD(path string) int {
	switch filepath.Clean(path) {
	case "/dev/stdin":
		return 0
	case "/dev/stdout":
		return 1
	case "/dev/stderr":
		return 2
	}
	if m := fdPath.FindStringSubmatch(filepath.Clean(path)); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil {
			return n
		}
	}
	return -1
}

var fdPath = regexp.MustCompile(`^/(?:dev/fd|proc/self/fd)/(\d+)$`)

// outTarget is the file path's symbolic links name, resolved as the kernel
// resolves them (each folder on the way with its own links), whether or not
// it exists yet; an error for a loop of links.
func outTarget(path string) (string, error) {
	p := path
	for range 40 {
		if t, err := filepath.EvalSymlinks(p); err == nil {
			return t, nil
		}
		// Not there (yet), or a link to nothing: resolve its folder, then
		// follow the last part by hand.
		dir, err := filepath.EvalSymlinks(filepath.Dir(p))
		if err != nil {
			return p, nil // checkOut said the folder is there; leave it to open
		}
		p = filepath.Join(dir, filepath.Base(p))
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			return p, nil
		}
		l, err := os.Readlink(p)
		if err != nil {
			return p, nil
		}
		if !filepath.IsAbs(l) {
			l = filepath.Join(dir, l)
		}
		p = l
	}
	return "", fmt.Errorf("--out %s: a loop of symbolic links", path)
}

func createOut(path string) (*outFile, error) {
	if err := checkOut(path); err != nil {
		return nil, err
	}
	if fd := inheritedFD(path); fd >= 0 {
		f, err := dupFD(fd, path) // its own descriptor on the same open file: offset and append mode shared
		if err != nil {
			return nil, fmt.Errorf("--out %s: descriptor %d: %w", path, fd, err)
		}
		return &outFile{path: path, f: f}, nil
	}
	target, err := outTarget(path)
	if err != nil {
		return nil, err
	}
	fi, statErr := os.Stat(target)
	if statErr == nil && !fi.Mode().IsRegular() { // a device, a pipe: in place
		f, err := os.OpenFile(target, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("--out %s: %w", path, userfile.Cause(err))
		}
		return &outFile{path: path, f: f}, nil
	}
	f, err := createPartial(target)
	if err == nil {
		if statErr == nil {
			f.Chmod(fi.Mode().Perm()) // the replaced file's mode; a new one's is the umask's
		}
		return &outFile{path: path, f: f, tmp: f.Name(), target: target}, nil
	}
	if statErr != nil || !errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("--out %s: %w", path, err)
	}
	// A folder this user may not create files in, a file they may write:
	// in place, as a shell's > would.
	return inPlace(path, target)
}

// createPartial creates a file of this run's own beside target
// (TARGET.partialNNNN, O_EXCL), with the mode a new file gets (0666 less
// the umask), as os.Create would give target itself.
func createPartial(target string) (*os.File, error) {
	var err error
	for range 100 {
		var f *os.File
		f, err = os.OpenFile(target+".partial"+strconv.FormatUint(uint64(rand.Uint32()), 10), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, err
}

func inPlace(path, target string) (*outFile, error) {
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return nil, fmt.Errorf("--out %s: %w", path, userfile.Cause(err))
	}
	return &outFile{path: path, f: f}, nil
}

// seekable tells whether bands may be written at their own offsets, in any
// order (a file of our own), rather than front to back.
func (o *outFile) seekable() bool { return o.tmp != "" }

// wrap names the file the user gave in a write's error, not the temporary
// one they never named.
func (o *outFile) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("--out %s: %w", o.path, userfile.Cause(err))
}

// commit closes the file and puts it under its name. In a sticky folder
// (/tmp) where another user's file may be written but not replaced, its
// bytes are copied into that file instead.
func (o *outFile) commit() error {
	if o.tmp == "" {
		return o.wrap(o.f.Close())
	}
	err := os.Rename(o.tmp, o.target)
	if err != nil && errors.Is(err, fs.ErrPermission) {
		err = o.copyInPlace()
	}
	o.f.Close()
	if err != nil {
		os.Remove(o.tmp)
		return o.wrap(err)
	}
	return nil
}

func (o *outFile) copyInPlace() error {
	dst, err := os.OpenFile(o.target, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := o.f.Seek(0, io.SeekStart); err != nil {
		dst.Close()
		return err
	}
	_, err = io.Copy(dst, o.f)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		os.Remove(o.tmp)
	}
	return err
}

// abort closes the file and removes what was written of it, never the
// file that was at the name before.
func (o *outFile) abort() {
	o.f.Close()
	if o.tmp != "" {
		os.Remove(o.tmp)
	}
}

// writeOut writes a whole result to path through an outFile.
func writeOut(path string, write func(f *os.File) error) error {
	o, err := createOut(path)
	if err != nil {
		return err
	}
	if err := write(o.f); err != nil {
		o.abort()
		return o.wrap(err)
	}
	return o.commit()
}
