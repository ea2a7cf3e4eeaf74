package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/internal/hugeheap"
)

// noteOut receives the command line's notes (where a source was read from).
var noteOut io.Writer = os.Stderr

// openSource turns a SOURCE argument into a hub.Source and prints, on
// stderr, a note when the bytes come from the Hugging Face cache.
func openSource(ctx context.Context, source string, sf sourceFlags) (hub.Source, error) {
	src, err := resolveSource(ctx, source, sf)
	if err != nil {
		return nil, err
	}
	if kind, where := hub.Origin(src); kind == "hf-cache" {
		hint := "--no-cache reads the hub"
		if offline, v := hfOffline(); offline {
			hint = "offline: " + v + "=" + os.Getenv(v)
		}
		fmt.Fprintf(noteOut, "note: %s read from the Hugging Face cache at %s (%s)\n", source, where, hint)
	}
	return src, nil
}

// resolveSource turns a SOURCE into a hub.Source: an existing local path
// first; then a repo (or one file of it) that this machine's Hugging Face
// cache holds at the asked revision, unless --no-cache or an --endpoint
// other than the hub's; then the remote
// forms, against --endpoint, else $HF_ENDPOINT, else the real hub. The token
// comes from --token, else $HF_TOKEN where envTokenGoesTo allows.
func resolveSource(ctx context.Context, source string, sf sourceFlags) (hub.Source, error) {
	_, statErr := os.Stat(source)
	if statErr == nil {
		if sf.endpoint != "" && !looksLocal(source) && !strings.Contains(source, "://") {
			// ORG/NAME that is also a folder here: the folder wins, said
			fmt.Fprintf(noteOut, "note: %s is read from the local folder of that name, not from --endpoint %s (give %s/%s to read the hub's)\n",
				source, sf.endpoint, strings.TrimRight(sf.endpoint, "/"), repoPart(source))
		}
		return hub.OpenLocal(source)
	}
	if !strings.Contains(source, "://") && looksLocal(source) {
		if errors.Is(statErr, fs.ErrNotExist) {
			return nil, fmt.Errorf("no such file or directory: %s", source)
		}
		return nil, statErr
	}
	src, err := resolveRemote(ctx, source, sf)
	if err != nil && !strings.Contains(source, "://") && errors.Is(statErr, fs.ErrNotExist) && errors.As(err, new(notRepoError)) {
		return nil, fmt.Errorf("no such file or directory: %s (nor is it ORG/NAME)", source)
	}
	return src, err
}

// notRepoError is hub.ParseSource's error: the SOURCE is no repo or URL.
type notRepoError struct{ error }

func (e notRepoError) Unwrap() error { return e.error }

// resolveRemote is resolveSource for a SOURCE that is not a local path: a
// repo (or one file of it) from the Hugging Face cache, else the hub.
func resolveRemote(ctx context.Context, source string, sf sourceFlags) (hub.Source, error) {
	endpoint := sf.endpoint
	if endpoint == "" {
		endpoint = os.Getenv("HF_ENDPOINT")
	}
	spec, err := hub.ParseSource(source, endpoint)
	if err != nil {
		return nil, notRepoError{err}
	}
	if sf.endpoint != "" && spec.Kind == hub.KindRepo && spec.Host() != (hub.Spec{Endpoint: sf.endpoint}).Host() {
		fmt.Fprintf(noteOut, "note: %s names %s itself; --endpoint %s applies to ORG/NAME sources (give %s to read it there)\n", source, spec.Host(), sf.endpoint, spec.Repo)
	}
	rev := spec.Rev
	if sf.revision != "" {
		// The page's engine lets its revision field win over an @REV in its
		// source field; its jobs here do the same.
		if rev != "" && rev != sf.revision && !sf.fromClient {
			return nil, fmt.Errorf("%s names revision %q and --revision says %q: give one", source, rev, sf.revision)
		}
		rev = sf.revision
	}
	offline, offlineVar := hfOffline()
	if offline && (sf.noCache || spec.Kind == hub.KindURL) {
		what := "--no-cache asks for the hub"
		if spec.Kind == hub.KindURL {
			what = source + " is read over the network"
		}
		return nil, fmt.Errorf("%s, and %s=%s forbids the network (offline, only local paths and this machine's Hugging Face cache are read)", what, offlineVar, os.Getenv(offlineVar))
	}
	// The Hugging Face cache holds the hub's repos (or $HF_ENDPOINT's, as
	// huggingface_hub keeps it for a mirror): an --endpoint typed on the
	// command line, or a URL, that names another server is read there.
	var cacheErr error
	if !sf.noCache && spec.Kind != hub.KindURL && cacheServes(spec) {
		c, err := hub.FindCached(hub.CacheDir(), spec.Repo, rev, spec.Path)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		if pe := new(hub.PartialSnapshotError); errors.As(err, &pe) && !offline {
			fmt.Fprintf(noteOut, "note: %s; reading the hub instead\n", pe)
		}
		cacheErr = err
	}
	if offline {
		if cacheErr == nil {
			return nil, fmt.Errorf("%s is read from %s, and %s=%s forbids the network (offline, only local paths and this machine's Hugging Face cache are read)", source, spec.Host(), offlineVar, os.Getenv(offlineVar))
		}
		return nil, fmt.Errorf("%s, and %s=%s forbids reading the hub (download it first, or unset %s)",
			strings.TrimSuffix(cacheErr.Error(), ": "+fs.ErrNotExist.Error()), offlineVar, os.Getenv(offlineVar), offlineVar)
	}
	token := sf.token
	if token == "" && envTokenGoesTo(spec, sf) {
		token = os.Getenv("HF_TOKEN")
	}
	// the companion streams modules: their bands are read ahead 4 MiB at a
	// time (one request, not 16 or 64)
	return hub.OpenSpec(ctx, spec, sf.revision, hub.WithToken(token), hub.WithReadAhead(4<<20))
}

// cacheServes says whether the Hugging Face cache holds the repos of the
// hub a spec reads: the hub's own, and $HF_ENDPOINT (huggingface_hub keeps
// one cache whichever endpoint it reads), compared whole, not by host: a
// mirror and another service on the same host are two hubs.
func cacheServes(spec hub.Spec) bool {
	if slices.Contains(hub.OfficialHosts, spec.Host()) {
		return true
	}
	e := os.Getenv("HF_ENDPOINT")
	return e != "" && strings.TrimRight(spec.Endpoint, "/") == strings.TrimRight(e, "/")
}

// hfOffline says whether huggingface_hub's offline switch is on:
// HF_HUB_OFFLINE (else TRANSFORMERS_OFFLINE) set to 1, ON, YES or TRUE, in
// any case, as huggingface_hub reads it. Offline, a repo is read from this
// machine's Hugging Face cache or not at all.
func hfOffline() (bool, string) {
	for _, v := range []string{"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"} {
		if s := os.Getenv(v); s != "" {
			return slices.Contains([]string{"1", "ON", "YES", "TRUE"}, strings.ToUpper(strings.TrimSpace(s))), v
		}
	}
	return false, ""
}

// envTokenGoesTo says whether $HF_TOKEN may be sent where spec points: to
// the Hugging Face hub, to $HF_ENDPOINT, or to an --endpoint typed on the
// command line; never to a hub or URL only a SOURCE or a websocket client
// names, which would hand the user's secret to any server they choose. A
// token given with the request itself (--token, a job's hub_token) goes
// where it is sent.
func envTokenGoesTo(spec hub.Spec, sf sourceFlags) bool {
	trusted := slices.Clone(hub.OfficialHosts)
	if e := os.Getenv("HF_ENDPOINT"); e != "" {
		trusted = append(trusted, hub.Spec{Endpoint: e}.Host())
	}
	if sf.endpoint != "" && !sf.fromClient {
		trusted = append(trusted, hub.Spec{Endpoint: sf.endpoint}.Host())
	}
	h := spec.Host()
	return h != "" && slices.Contains(trusted, h)
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
	return loadModules(ctx, source, sf, nil)
}

// loadModules is loadCheckpoint for a command that uses only the modules
// (or tensors) named: of an indexed repo only their shards are read
// (checkpoint.Options.Modules).
func loadModules(ctx context.Context, source string, sf sourceFlags, modules []string) (*checkpoint.Checkpoint, error) {
	src, err := openSource(ctx, source, sf)
	if err != nil {
		return nil, err
	}
	prepareHeap()
	return loadFrom(ctx, src, checkpoint.Options{Modules: modules})
}

// prepareHeap puts the heap a command's inventory is built in on huge
// pages (internal/hugeheap): once a process, for the CLI only, whose runs
// are short; serve's long-lived heap is left as the runtime keeps it.
var prepareHeap = sync.OnceFunc(func() { hugeheap.Prepare(256 << 20) })

// loadFrom loads a resolved source, reading weight_shape values when local.
func loadFrom(ctx context.Context, src hub.Source, opt checkpoint.Options) (*checkpoint.Checkpoint, error) {
	_, local := src.(interface{ Local() bool })
	opt.ReadShapeTensors = local
	return checkpoint.Load(ctx, src, opt)
}
