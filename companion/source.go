package main

import (
	"context"
	"fmt"
	"os"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
)

// openSource turns a SOURCE argument into a hub.Source.
func openSource(ctx context.Context, source string, sf sourceFlags) (hub.Source, error) {
	if _, err := os.Stat(source); err == nil {
		return hub.OpenLocal(source)
	}
	return nil, fmt.Errorf("%s: not a local file or directory (remote sources are read through formats/hub's remote client)", source)
}

func loadCheckpoint(ctx context.Context, source string, sf sourceFlags) (*checkpoint.Checkpoint, error) {
	src, err := openSource(ctx, source, sf)
	if err != nil {
		return nil, err
	}
	return checkpoint.Load(ctx, src, checkpoint.Options{ReadShapeTensors: true})
}
