package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/quantscope/quantscope/companion/ops"
	"github.com/quantscope/quantscope/companion/proto"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/synth"
)

// A job's SOURCE is a local path only under the companion's --in-dir; one
// that names a folder in the companion's working folder, or anywhere else,
// is not read from there (ORG/NAME goes to the cache and the hub, a path is
// refused with rule in-dir), where the command line reads what its user typed.
func TestJobSourceConfined(t *testing.T) {
	work, in := t.TempDir(), t.TempDir()
	r := synth.ModelOptNVFP4()
	for _, d := range []string{work, in} {
		if err := r.WriteDir(filepath.Join(d, "org", "name")); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(work)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("HF_ENDPOINT", srv.URL)
	ctx := context.Background()
	abs := filepath.Join(work, "org", "name")

	// The command line reads the working folder's org/name and absolute paths.
	for _, src := range []string{"org/name", abs} {
		if s, err := resolveSource(ctx, src, sourceFlags{}); err != nil || !isLocal(s) {
			t.Errorf("command line %q: %v, %T", src, err, s)
		}
	}
	for _, c := range []struct {
		source, inDir string
		want          string // "" : read from the input folder; "hub": sent to the hub; else a piece of the error
	}{
		{"org/name", in, ""},
		{"org/name", "", "hub"},           // the working folder's copy is not read
		{abs, "", "reads no local files"}, // nor anything absolute
		{abs, in, "not a relative path inside"},
		{"../" + filepath.Base(work) + "/org/name", in, "not a relative path inside"},
		{"./org/name", "", "serve --in-dir DIR"},
		{"org/name/missing.safetensors", in, "no such file or directory under the companion's input folder"},
	} {
		local, err := jobLocalPath(c.source, c.inDir)
		switch c.want {
		case "":
			if err != nil || local != filepath.Join(in, "org", "name") {
				t.Errorf("%q under %q: %q, %v; want the input folder's copy", c.source, c.inDir, local, err)
			}
			ck, err := loadSubmit(ctx, proto.Submit{Source: c.source}, c.inDir, nil)
			if err != nil || ck.InventoryWithoutTensors().Summary.Tensors == 0 {
				t.Errorf("%q: loading the input folder's copy: %v", c.source, err)
			} else {
				ck.Close()
			}
		case "hub":
			if err != nil || local != "" {
				t.Errorf("%q under %q: %q, %v; want a repo", c.source, c.inDir, local, err)
			}
			before := asked.Load()
			if _, err := loadSubmit(ctx, proto.Submit{Source: c.source}, c.inDir, nil); err == nil || asked.Load() == before {
				t.Errorf("%q: %v after %d requests to the hub; want the hub's 404", c.source, err, asked.Load()-before)
			}
		default:
			_, err := loadSubmit(ctx, proto.Submit{Source: c.source}, c.inDir, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%q under %q: %v; want %q", c.source, c.inDir, err, c.want)
			}
			if strings.Contains(c.want, "relative") && !strings.Contains(err.Error(), "rule "+ops.RuleInDir) {
				t.Errorf("%q: %v without rule %s", c.source, err, ops.RuleInDir)
			}
		}
	}
}

func isLocal(s hub.Source) bool {
	_, ok := s.(interface{ Local() bool })
	return ok
}
