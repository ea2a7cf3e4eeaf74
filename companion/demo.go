package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/quantscope/quantscope/synth"
)

func cmdDemo(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return &usageError{"demo wants DIR"}
	}
	for _, r := range synth.All() {
		dir := filepath.Join(args[0], filepath.FromSlash(r.ID))
		if err := r.WriteDir(dir); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\t%s\n", dir, r.About)
	}
	return nil
}
