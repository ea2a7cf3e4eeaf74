package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"testing"

	"github.com/quantscope/quantscope/formats/hub"
)

// failingShards is a repo of n indexed shards, each of which fails to open
// with the error its position gives.
type failingShards struct {
	n   int
	err func(i int) error
}

func (f failingShards) shard(i int) string {
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, f.n)
}

func (f failingShards) Name() string { return "org/name@main" }

func (f failingShards) List(context.Context) ([]hub.File, error) {
	files := []hub.File{{Path: indexFile, Size: 100}}
	for i := range f.n {
		files = append(files, hub.File{Path: f.shard(i), Size: 1000})
	}
	return files, nil
}

func (f failingShards) ReadFile(_ context.Context, p string, _ int64) ([]byte, error) {
	if p != indexFile {
		return nil, fs.ErrNotExist
	}
	var b strings.Builder
	b.WriteString(`{"weight_map":{`)
	for i := range f.n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"t%d.weight":%q`, i, f.shard(i))
	}
	b.WriteString("}}")
	return []byte(b.String()), nil
}

func (f failingShards) Open(_ context.Context, p string) (io.ReaderAt, int64, error) {
	var i int
	fmt.Sscanf(p, "model-%05d", &i)
	return nil, 0, fmt.Errorf("%s: %w", p, f.err(i-1))
}

// When every shard fails, the error's text names the first two and counts
// the rest, and errors.As still finds what only a later shard said (a 403
// from the fifth shard makes it an authentication error for the page and
// the jobs, whatever the first two said).
func TestShardErrorsSummarised(t *testing.T) {
	src := failingShards{n: 8, err: func(i int) error {
		if i == 4 {
			return &hub.HTTPError{URL: "https://hub/x", Status: 403}
		}
		return errors.New("connection reset by peer")
	}}
	_, err := Load(context.Background(), src, Options{})
	if err == nil {
		t.Fatal("a repo whose shards all fail loaded")
	}
	if msg := err.Error(); strings.Count(msg, "connection reset") != 2 || !strings.HasSuffix(msg, "and 6 more of the 8 shards could not be read") {
		t.Errorf("error text: %q", msg)
	}
	var he *hub.HTTPError
	if !errors.As(err, &he) || he.Status != 403 {
		t.Errorf("errors.As found %v in %v: the fifth shard's 403 is hidden", he, err)
	}
}
