//go:build unix

package userfile

import (
	"os"
	"syscall"
)

// openNoBlock opens with O_NONBLOCK, which makes opening a FIFO with no
// writer return at once and changes nothing for a regular file's reads.
func openNoBlock(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
