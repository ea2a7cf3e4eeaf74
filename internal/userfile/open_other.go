//go:build !unix

package userfile

import (
	"fmt"
	"os"
)

// openNoBlock checks the path's type before opening it (there is no
// non-blocking open here); Open checks the opened file again.
func openNoBlock(path string) (*os.File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, kind(st.Mode()))
	}
	return os.Open(path)
}
