package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
)

func cmdDemo(ctx context.Context, args []string, stdout io.Writer) error {
	args, err := parseFlags(flag.NewFlagSet("demo", flag.ContinueOnError), args, 1, "DIR")
	if err != nil {
		return err
	}
	if err := writeDemos(args[0]); err != nil {
		return err
	}
	for _, d := range demoRepos() {
		fmt.Fprintf(stdout, "%s\t%s\n", filepath.Join(args[0], filepath.FromSlash(d.id)), d.about)
	}
	return nil
}
