package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
)

// openSource turns a SOURCE argument into a hub.Source: an existing local
// path first, then the remote forms, against --endpoint, else $HF_ENDPOINT,
// else the real hub. The token comes from --token, else $HF_TOKEN.
func openSource(ctx context.Context, source string, sf sourceFlags) (hub.Source, error) {
	_, statErr := os.Stat(source)
	if statErr == nil {
		return hub.OpenLocal(source)
	}
	if !strings.Contains(source, "://") && looksLocal(source) {
		if errors.Is(statErr, fs.ErrNotExist) {
			return nil, fmt.Errorf("no such file or directory: %s", source)
		}
		return nil, statErr
	}
	endpoint := sf.endpoint
	if endpoint == "" {
		endpoint = os.Getenv("HF_ENDPOINT")
	}
	spec, err := hub.ParseSource(source, endpoint)
	if err != nil {
		if !strings.Contains(source, "://") && errors.Is(statErr, fs.ErrNotExist) {
			return nil, fmt.Errorf("no such file or directory: %s (nor is it ORG/NAME)", source)
		}
		return nil, err
	}
	token := sf.token
	if token == "" {
		token = os.Getenv("HF_TOKEN")
	}
	return hub.OpenSpec(ctx, spec, sf.revision, hub.WithToken(token))
}

// looksLocal tells a SOURCE that can only mean a local path (absolute, or
// starting with . or ~, or naming a .safetensors file without a scheme) from
// one that may be ORG/NAME.
func looksLocal(source string) bool {
	return filepath.IsAbs(source) || strings.HasPrefix(source, ".") || strings.HasPrefix(source, "~") ||
		strings.HasSuffix(source, ".safetensors") || strings.Count(repoPart(source), "/") > 1
}

// repoPart is a SOURCE without its @REV (a revision may hold slashes).
func repoPart(source string) string {
	repo, _, _ := strings.Cut(source, "@")
	return repo
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
