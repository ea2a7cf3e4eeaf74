//go:build !unix

package main

import (
	"errors"
	"os"
)

// dupFD: /dev/stdout and /dev/fd/N are Unix names.
func dupFD(fd int, name string) (*os.File, error) {
	return nil, errors.New("descriptor paths are Unix names")
}
