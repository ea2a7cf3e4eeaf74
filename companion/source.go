package main

import (
	"context"
	"os"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
)

// openSource turns a SOURCE argument into a hub.Source: an existing local
// path first, then the remote forms, against --endpoint, else $HF_ENDPOINT,
// else the real hub. The token comes from --token, else $HF_TOKEN.
func openSource(ctx context.Context, source string, sf sourceFlags) (hub.Source, error) {
	if _, err := os.Stat(source); err == nil {
		return hub.OpenLocal(source)
	}
	endpoint := sf.endpoint
	if endpoint == "" {
		endpoint = os.Getenv("HF_ENDPOINT")
	}
	spec, err := hub.ParseSource(source, endpoint)
	if err != nil {
		return nil, err
	}
	token := sf.token
	if token == "" {
		token = os.Getenv("HF_TOKEN")
	}
	return hub.OpenSpec(ctx, spec, sf.revision, hub.WithToken(token))
}

// loadCheckpoint reads a SOURCE's inventory. Locally it also reads the
// 16-byte weight_shape tensors for exact logical widths; remotely each would
// cost a request, so widths are inferred from the packed width and the
// scales, and a CT-004 note says so.
func loadCheckpoint(ctx context.Context, source string, sf sourceFlags) (*checkpoint.Checkpoint, error) {
	src, err := openSource(ctx, source, sf)
	if err != nil {
		return nil, err
	}
	_, local := src.(interface{ Local() bool })
	return checkpoint.Load(ctx, src, checkpoint.Options{ReadShapeTensors: local})
}
