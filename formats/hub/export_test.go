package hub_test

import "io"

func errEOF() error { return io.EOF }
