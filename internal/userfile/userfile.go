// Package userfile opens and reads the files a user or a client names (a
// data file, a text file, a shard, a cache's ref): regular files only, and
// whole reads bounded. A FIFO, a device such as /dev/zero or a directory is
// refused before anything blocks on it or reads without end, with an error
// naming the path; a regular file larger than the bound is refused too.
package userfile

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrNotRegular is the error for a path that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is the error for a file over the bound a read was given.
var ErrTooLarge = errors.New("file too large")

// Open opens path for reading if it is a regular file. The open itself does
// not block on a FIFO (on Unix it is made non-blocking, and the file's type
// checked on the open descriptor, so a path swapped in between is caught).
func Open(path string) (*os.File, error) {
	f, err := openNoBlock(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, kind(st.Mode()))
	}
	return f, nil
}

// Read reads a regular file whole, refusing one of more than max bytes
// (it stops reading at max+1 bytes, whatever the file's size claims).
func Read(path string, max int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b []byte
	if st, err := f.Stat(); err == nil && st.Size() <= max {
		b = make([]byte, 0, st.Size()+1)
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		room := min(int64(cap(b)), max+1)
		if int64(len(b)) >= room {
			return nil, fmt.Errorf("%s: %w: over %d bytes", path, ErrTooLarge, max)
		}
		n, err := f.Read(b[len(b):room])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
}

// kind names a file mode that is not a regular file.
func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return m.Type().String()
}

// Cause is a path error's cause alone (a *os.PathError's or *os.LinkError's
// Err), for a message that names the path in the user's words itself; any
// other error as it is.
func Cause(err error) error {
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
