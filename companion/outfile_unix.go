//go:build unix

package main

import (
	"os"
	"syscall"
)

// dupFD is a descriptor of its own on the open file fd names.
func dupFD(fd int, name string) (*os.File, error) {
	n, err := syscall.Dup(fd)
	if err != nil {
		return nil, err
	}
	syscall.CloseOnExec(n)
	return os.NewFile(uintptr(n), name), nil
}
