package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
)

func cmdDemo(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return &usageError{"demo wants DIR"}
	}
	if err := writeDemos(args[0]); err != nil {
		return err
	}
	for _, d := range demoRepos() {
		fmt.Fprintf(stdout, "%s\t%s\n", filepath.Join(args[0], filepath.FromSlash(d.id)), d.about)
	}
	return nil
}
