package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// outFile is the file a command writes its result to (--out). A regular
// file, or a new one, is written beside its name as NAME.partial and renamed
// over it once whole (through a symbolic link, over the file the link names,
// with that file's mode), so a run that fails leaves what was there and no
// half file under the name asked for. What is no regular file (a device such
// as /dev/null, a named pipe, /dev/stdout and the /proc/self/fd files) is
// written in place, front to back, and never removed; so is a file in a
// folder this user may not write in.
type outFile struct {
	path   string // as the user gave it
	f      *os.File
	tmp    string // the file being written, "" when in place
	target string // what tmp is renamed to: path, or the file its link names
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

// outTarget follows path's symbolic links to the file they name; special
// is whether a hop lies under /dev or /proc (stdout, a descriptor), which
// is written in place whatever it names.
func outTarget(path string) (target string, special bool) {
	p, err := filepath.Abs(path)
	if err != nil {
		return path, false
	}
	for range 40 {
		if strings.HasPrefix(p, "/dev/") || strings.HasPrefix(p, "/proc/") {
			return p, true
		}
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			return p, false
		}
		l, err := os.Readlink(p)
		if err != nil {
			return p, false
		}
		if !filepath.IsAbs(l) {
			l = filepath.Join(filepath.Dir(p), l)
		}
		p = l
	}
	return p, false
}

func createOut(path string) (*outFile, error) {
	if err := checkOut(path); err != nil {
		return nil, err
	}
	target, special := outTarget(path)
	fi, statErr := os.Stat(target)
	if !special && (statErr != nil || fi.Mode().IsRegular()) {
		tmp := target + ".partial"
		mode := os.FileMode(0o644)
		if statErr == nil {
			mode = fi.Mode().Perm()
		}
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
		if err == nil {
			if statErr == nil {
				f.Chmod(mode) // the replaced file's mode, whatever the umask
			}
			return &outFile{path: path, f: f, tmp: tmp, target: target}, nil
		}
		if statErr != nil || !errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("--out %s: %w", path, err) // it names the .partial in the way
		}
		// a folder this user may not write in, a file they may: in place
	}
	flags := os.O_WRONLY
	if statErr == nil && fi.Mode().IsRegular() {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return nil, fmt.Errorf("--out %s: %w", path, bare(err))
	}
	return &outFile{path: path, f: f}, nil
}

// seekable tells whether bands may be written at their own offsets, in any
// order (a regular file), rather than front to back.
func (o *outFile) seekable() bool { return o.tmp != "" }

// wrap names the file the user gave in a write's error, not the .partial
// one they never named.
func (o *outFile) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("--out %s: %w", o.path, bare(err))
}

// commit closes the file and puts it under its name.
func (o *outFile) commit() error {
	if err := o.f.Close(); err != nil {
		o.abort()
		return o.wrap(err)
	}
	if o.tmp != "" {
		if err := os.Rename(o.tmp, o.target); err != nil {
			os.Remove(o.tmp)
			return o.wrap(err)
		}
	}
	return nil
}

// abort closes the file and removes what was written of it, never the
// file that was at the name before.
func (o *outFile) abort() {
	o.f.Close()
	if o.tmp != "" {
		os.Remove(o.tmp)
	}
}

// bare is a path error's cause alone, for errors that name the path
// themselves.
func bare(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
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
