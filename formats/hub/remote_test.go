package hub_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quantscope/quantscope/companion/localhub"
	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/synth"
)

type env struct {
	dir  string
	srv  *httptest.Server
	hub  *localhub.Server
	mu   sync.Mutex
	gets map[string]int // ranged file GETs answered, by repo path
}

func newEnv(t *testing.T, opt localhub.Options, repos ...*synth.Repo) *env {
	t.Helper()
	e := &env{dir: t.TempDir(), gets: map[string]int{}}
	for _, r := range repos {
		if err := r.WriteDir(filepath.Join(e.dir, filepath.FromSlash(r.ID))); err != nil {
			t.Fatal(err)
		}
	}
	inner := opt.Faults
	opt.Faults = func(r *http.Request, p string, n int) localhub.Fault {
		e.mu.Lock()
		e.gets[p]++
		e.mu.Unlock()
		if inner != nil {
			return inner(r, p, n)
		}
		return localhub.Fault{}
	}
	h, err := localhub.New(e.dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	e.hub = h
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) client(t *testing.T, opts ...hub.Option) *hub.Client {
	t.Helper()
	c, err := hub.NewClient(append([]hub.Option{hub.WithEndpoint(e.srv.URL), hub.WithBackoff(time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func loadRemote(t *testing.T, src hub.Source) *checkpoint.Checkpoint {
	t.Helper()
	return loadWith(t, src, checkpoint.Options{})
}

func loadWith(t *testing.T, src hub.Source, opt checkpoint.Options) *checkpoint.Checkpoint {
	t.Helper()
	c, err := checkpoint.Load(context.Background(), src, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// comparable drops what legitimately differs between a local and a remote
// read: the name, the traffic, and the commit the hub names (a folder has
// none; TestRemoteNamesCommit checks it).
func comparable(t *testing.T, inv *checkpoint.Inventory) string {
	inv.Source, inv.Fetch, inv.Commit = "", hub.Stats{}, ""
	b, err := json.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRemoteInventoryEqualsLocal(t *testing.T) {
	repos := synth.All()
	e := newEnv(t, localhub.Options{PageSize: 7}, repos...) // small pages: every listing paginates
	for _, r := range repos {
		t.Run(r.ID, func(t *testing.T) {
			// With the same options the two reads give the same inventory; the
			// exact shapes (16-byte weight_shape reads) are checked too.
			exact := checkpoint.Options{ReadShapeTensors: true}
			local := loadWith(t, &hub.Dir{Root: filepath.Join(e.dir, filepath.FromSlash(r.ID))}, exact)
			remoteExact := loadWith(t, e.client(t).OpenRepo(context.Background(), r.ID, ""), exact)
			if a, b := comparable(t, local.Inventory()), comparable(t, remoteExact.Inventory()); a != b {
				t.Fatalf("remote inventory differs from local:\nlocal  %.400s\nremote %.400s", a, b)
			}
			localHeaders := loadRemote(t, &hub.Dir{Root: filepath.Join(e.dir, filepath.FromSlash(r.ID))})
			c := e.client(t)
			remote := loadRemote(t, c.OpenRepo(context.Background(), r.ID, ""))
			if a, b := comparable(t, localHeaders.Inventory()), comparable(t, remote.Inventory()); a != b {
				t.Fatalf("headers-only remote inventory differs from local:\nlocal  %.400s\nremote %.400s", a, b)
			}
			// Requests: the listing pages, the config files, then per shard one
			// ranged GET and its redirect hop.
			pages := (len(r.Files) + countDirs(r) + 6) / 7
			configs := 0
			shards := 0
			for p := range r.Files {
				switch {
				case strings.HasSuffix(p, ".json"):
					configs++
				case strings.HasSuffix(p, ".safetensors"):
					shards++
				}
			}
			st := c.Stats()
			if want := int64(pages + configs + 2*shards); st.Requests > want {
				t.Errorf("%d requests, want at most %d (%d pages, %d configs, %d shards)", st.Requests, want, pages, configs, shards)
			}
		})
	}
}

func countDirs(r *synth.Repo) int {
	dirs := map[string]bool{}
	for p := range r.Files {
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	return len(dirs)
}

func TestResolvedURLReusedAndCached(t *testing.T) {
	r := synth.CTW4A16()
	e := newEnv(t, localhub.Options{}, r)
	c := e.client(t)
	ck := loadRemote(t, c.OpenRepo(context.Background(), r.ID, ""))
	before := c.Stats().Requests
	inv := ck.Inventory()
	last := inv.Tensors[len(inv.Tensors)-1] // the end of the file, far from the header
	if _, err := ck.ReadTensor(last.Name, 0, 2); err != nil {
		t.Fatal(err)
	}
	if got := c.Stats().Requests - before; got != 1 {
		t.Fatalf("a later read of a resolved file took %d requests, want 1 (straight to the CDN URL)", got)
	}
	if _, err := ck.ReadTensor(last.Name, 2, 2); err != nil {
		t.Fatal(err)
	}
	if got := c.Stats().Requests - before; got != 1 {
		t.Fatalf("a neighbouring read refetched (%d requests)", got)
	}
}

func TestLargeHeaderTakesTwoReads(t *testing.T) {
	// No index, and a header over the 100 KB first read.
	var ts []safetensors.WriteTensor
	for i := range 1500 {
		ts = append(ts, safetensors.WriteTensor{Name: fmt.Sprintf("model.layers.%d.some.rather.long.tensor.name.weight", i), DType: safetensors.BF16, Shape: []uint64{2}, Data: make([]byte, 4)})
	}
	b, err := safetensors.Encode(ts, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, localhub.Options{})
	dir := filepath.Join(e.dir, "org", "big")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644)
	c := e.client(t)
	ck := loadRemote(t, c.OpenRepo(context.Background(), "org/big", ""))
	if len(ck.TensorNames()) != 1500 {
		t.Fatalf("%d tensors", len(ck.TensorNames()))
	}
	if n := e.gets["model.safetensors"]; n != 2 {
		t.Fatalf("%d ranged reads of the shard, want exactly 2", n)
	}
}

func TestFaults(t *testing.T) {
	r := synth.AWQInt4()
	const shard = "model.safetensors"
	cases := []struct {
		name  string
		fault func(n int) localhub.Fault
		opts  []hub.Option
		check func(t *testing.T, err error, c *hub.Client)
	}{
		{"429 with Retry-After", func(n int) localhub.Fault {
			if n == 1 {
				return localhub.Fault{Status: 429, RetryAfter: "1"}
			}
			return localhub.Fault{}
		}, nil, func(t *testing.T, err error, c *hub.Client) {
			if err != nil {
				t.Fatal(err)
			}
		}},
		{"500 then success", func(n int) localhub.Fault {
			if n <= 2 {
				return localhub.Fault{Status: 500}
			}
			return localhub.Fault{}
		}, nil, func(t *testing.T, err error, c *hub.Client) {
			if err != nil {
				t.Fatal(err)
			}
		}},
		{"500 forever", func(n int) localhub.Fault { return localhub.Fault{Status: 503} }, []hub.Option{hub.WithRetries(2)},
			func(t *testing.T, err error, c *hub.Client) {
				var he *hub.HTTPError
				if !errors.As(err, &he) || he.Status != 503 || !strings.Contains(err.Error(), shard) {
					t.Fatalf("got %v", err)
				}
			}},
		{"reset mid-body", func(n int) localhub.Fault {
			if n == 1 {
				return localhub.Fault{ResetAfter: 100}
			}
			return localhub.Fault{}
		}, nil, func(t *testing.T, err error, c *hub.Client) {
			if err != nil {
				t.Fatal(err)
			}
		}},
		{"range ignored", func(n int) localhub.Fault { return localhub.Fault{IgnoreRange: true} }, nil,
			func(t *testing.T, err error, c *hub.Client) {
				if err != nil {
					t.Fatal(err)
				}
				if st := c.Stats(); st.Bytes > 200_000 {
					t.Fatalf("read %d bytes of a full-body answer; only the header was needed", st.Bytes)
				}
			}},
		{"ETag change", func(n int) localhub.Fault {
			if n >= 2 {
				return localhub.Fault{ETag: `"other-version"`}
			}
			return localhub.Fault{}
		}, nil, func(t *testing.T, err error, c *hub.Client) {
			if !errors.Is(err, hub.ErrChanged) {
				t.Fatalf("got %v, want ErrChanged", err)
			}
		}},
		{"CDN ETag spelled apart from X-Linked-ETag", func(n int) localhub.Fault { return localhub.Fault{ETag: `"cdn-multipart-3"`} }, nil,
			func(t *testing.T, err error, c *hub.Client) {
				if err != nil {
					t.Fatalf("a CDN ETag that differs from the hub's X-Linked-ETag but stays the same is no change: %v", err)
				}
			}},
		{"slow body past the timeout", func(n int) localhub.Fault { return localhub.Fault{SlowBody: 2 * time.Second} },
			[]hub.Option{hub.WithTimeout(150 * time.Millisecond), hub.WithRetries(1)}, func(t *testing.T, err error, c *hub.Client) {
				if err == nil || !strings.Contains(err.Error(), "within") {
					t.Fatalf("got %v", err)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, localhub.Options{Faults: func(req *http.Request, p string, n int) localhub.Fault {
				if p != shard {
					return localhub.Fault{}
				}
				return tc.fault(n)
			}}, r)
			c := e.client(t, tc.opts...)
			ck, err := checkpoint.Load(context.Background(), c.OpenRepo(context.Background(), r.ID, ""), checkpoint.Options{})
			if err == nil && (tc.name == "ETag change" || strings.HasPrefix(tc.name, "CDN ETag")) {
				// the header came in one read; the change shows on the next read
				m, _ := ck.Module("model.layers.0.mlp.up_proj")
				qw, _ := m.Info("qweight")
				_, err = ck.ReadTensor(qw.Name, 0, int64(qw.NBytes))
			}
			if ck != nil {
				defer ck.Close()
			}
			tc.check(t, err, c)
		})
	}
}

func TestGated(t *testing.T) {
	r := synth.GPTQInt4()
	e := newEnv(t, localhub.Options{}, r)
	os.WriteFile(filepath.Join(e.dir, filepath.FromSlash(r.ID), localhub.GatedFile), []byte("hf_secret\n"), 0o644)
	_, err := checkpoint.Load(context.Background(), e.client(t).OpenRepo(context.Background(), r.ID, ""), checkpoint.Options{})
	var he *hub.HTTPError
	if !errors.As(err, &he) || he.Status != 401 || !strings.Contains(err.Error(), r.ID) || !strings.Contains(err.Error(), "token") {
		t.Fatalf("without a token: %v", err)
	}
	if strings.Contains(err.Error(), "hf_secret") {
		t.Fatal("error shows the token")
	}
	if !strings.Contains(err.Error(), "the repo is gated: request access") {
		t.Fatalf("without a token, the hub's GatedRepo code not read: %v", err)
	}
	_, err = checkpoint.Load(context.Background(), e.client(t, hub.WithToken("wrong")).OpenRepo(context.Background(), r.ID, ""), checkpoint.Options{})
	if !errors.As(err, &he) || he.Status != 403 || !strings.Contains(err.Error(), "gated") {
		t.Fatalf("a token without access: %v", err)
	}
	ck := loadRemote(t, e.client(t, hub.WithToken("hf_secret")).OpenRepo(context.Background(), r.ID, ""))
	if len(ck.Modules) == 0 {
		t.Fatal("no modules with the token")
	}
}

func TestIndexNamesMissingShard(t *testing.T) {
	r := synth.DeepSeekFP8()
	e := newEnv(t, localhub.Options{}, r)
	os.Remove(filepath.Join(e.dir, filepath.FromSlash(r.ID), "model-00002-of-00002.safetensors"))
	_, err := checkpoint.Load(context.Background(), e.client(t).OpenRepo(context.Background(), r.ID, ""), checkpoint.Options{})
	if err == nil || !strings.Contains(err.Error(), "model-00002-of-00002.safetensors") || !strings.Contains(err.Error(), "index-missing-shard") {
		t.Fatalf("got %v", err)
	}
}

func TestSourcesForms(t *testing.T) {
	r := synth.ModelOptNVFP4()
	e := newEnv(t, localhub.Options{}, r)
	c := e.client(t)
	ctx := context.Background()
	whole := loadRemote(t, c.OpenRepo(ctx, r.ID, "main")).Inventory()
	for name, src := range map[string]hub.Source{
		"repo file": c.OpenRepoFile(ctx, r.ID, "main", "model.safetensors"),
		"plain url": c.OpenURL(ctx, e.srv.URL+"/"+r.ID+"/resolve/main/model.safetensors"),
	} {
		inv := loadRemote(t, src).Inventory()
		if inv.Summary.Tensors != whole.Summary.Tensors || inv.Summary.Parameters != whole.Summary.Parameters {
			t.Errorf("%s: %+v", name, inv.Summary)
		}
		if name == "repo file" && inv.Scheme.Method != "modelopt" {
			t.Errorf("repo file: the repo's configs were not read: %+v", inv.Scheme)
		}
	}
	if _, err := checkpoint.Load(ctx, c.OpenRepoFile(ctx, r.ID, "main", "nope.safetensors"), checkpoint.Options{}); err == nil {
		t.Error("missing file accepted")
	}
}

// Parallel ReadAt calls on one RemoteFile fill their buffers correctly.
func TestRemoteFileParallel(t *testing.T) {
	r := synth.GPTOSSMXFP4()
	e := newEnv(t, localhub.Options{}, r)
	c := e.client(t)
	data := r.Files["model.safetensors"]
	f := c.NewRemoteFile(context.Background(), e.srv.URL+"/"+r.ID+"/resolve/main/model.safetensors", "model.safetensors", int64(len(data)))
	var wg sync.WaitGroup
	var bad atomic.Int32
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := int64(i) * int64(len(data)) / 33
			buf := make([]byte, 70_000)
			n, err := f.ReadAt(buf, off)
			if err != nil || n != len(buf) || string(buf) != string(data[off:off+int64(len(buf))]) {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d parallel reads wrong", bad.Load())
	}
	buf := make([]byte, 100)
	if n, err := f.ReadAt(buf, int64(len(data))-10); n != 10 || !errors.Is(err, errEOF()) {
		t.Fatalf("read past the end: %d %v", n, err)
	}
}

func TestOptions(t *testing.T) {
	for _, opts := range [][]hub.Option{
		{hub.WithEndpoint("ftp://x")},
		{hub.WithEndpoint("http://a"), hub.WithEndpoint("http://b")},
		{hub.WithParallel(0)},
		{hub.WithRetries(-1)},
		{hub.WithTimeout(0)},
		{hub.WithFetcher(nil)},
		{hub.WithDefaultPrefix(4)},
	} {
		if _, err := hub.NewClient(opts...); err == nil {
			t.Errorf("options accepted")
		}
	}
	if _, err := hub.NewClient(hub.WithEndpoint("http://a/"), hub.WithEndpoint("http://a")); err != nil {
		t.Errorf("the same endpoint twice: %v", err)
	}
}

// A revision with slashes (a PR's refs/pr/1, a branch feature/x) travels
// escaped, as one path segment, through the listing, the resolve and the
// CDN redirect, against a hub that knows it.
func TestSlashRevision(t *testing.T) {
	r := synth.GPTQInt4()
	e := newEnv(t, localhub.Options{}, r)
	os.WriteFile(filepath.Join(e.dir, filepath.FromSlash(r.ID), localhub.RevisionsFile), []byte("refs/pr/1\nfeature/x\n"), 0o644)
	for _, rev := range []string{"refs/pr/1", "feature/x"} {
		ck := loadRemote(t, e.client(t).OpenRepo(context.Background(), r.ID, rev))
		if len(ck.Modules) == 0 {
			t.Fatalf("%s: no modules", rev)
		}
	}
	if _, err := checkpoint.Load(context.Background(), e.client(t).OpenRepo(context.Background(), r.ID, "refs/pr/2"), checkpoint.Options{}); err == nil || !strings.Contains(err.Error(), "revision not found") {
		t.Fatalf("an unknown slash revision: %v", err)
	}
}

// commitRewriter answers with another X-Repo-Commit, as the hub does once
// the branch has moved.
type commitRewriter struct {
	http.ResponseWriter
	commit string
}

func (w commitRewriter) WriteHeader(code int) {
	if w.Header().Get("X-Repo-Commit") != "" {
		w.Header().Set("X-Repo-Commit", w.commit)
	}
	w.ResponseWriter.WriteHeader(code)
}

// A branch that moves while a repo is read (the hub's X-Repo-Commit changes
// between two of its answers) fails the load, saying so, instead of mixing
// the index of one commit with shards of another; a revision that holds
// still loads.
func TestRevisionMovesMidRead(t *testing.T) {
	r := synth.DeepSeekFP8() // two shards
	e := newEnv(t, localhub.Options{}, r)
	if ck := loadRemote(t, e.client(t).OpenRepo(context.Background(), r.ID, "")); len(ck.Modules) == 0 {
		t.Fatal("no modules")
	}
	moved := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		if strings.Contains(q.URL.Path, "/resolve/") && strings.HasSuffix(q.URL.Path, "00002-of-00002.safetensors") {
			w = commitRewriter{w, strings.Repeat("f", 40)}
		}
		e.hub.ServeHTTP(w, q)
	}))
	t.Cleanup(moved.Close)
	c, err := hub.NewClient(hub.WithEndpoint(moved.URL), hub.WithBackoff(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = checkpoint.Load(context.Background(), c.OpenRepo(context.Background(), r.ID, ""), checkpoint.Options{})
	if !errors.Is(err, hub.ErrChanged) || !strings.Contains(err.Error(), "revision main was commit") {
		t.Fatalf("a branch that moved mid-read: %v", err)
	}
}

// A repo read over the network names the commit its revision named, as the
// hub said it (X-Repo-Commit); a folder names none.
func TestRemoteNamesCommit(t *testing.T) {
	r := synth.ModelOptNVFP4()
	e := newEnv(t, localhub.Options{}, r)
	remote := loadRemote(t, e.client(t).OpenRepo(context.Background(), r.ID, ""))
	local := loadRemote(t, &hub.Dir{Root: filepath.Join(e.dir, filepath.FromSlash(r.ID))})
	resp, err := http.Head(e.srv.URL + "/" + r.ID + "/resolve/main/config.json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := resp.Header.Get("X-Repo-Commit")
	if got := remote.Inventory().Commit; len(want) != 40 || got != want {
		t.Errorf("remote inventory's commit %q, the hub says %q", got, want)
	}
	if got := local.Inventory().Commit; got != "" {
		t.Errorf("a folder's inventory names commit %q", got)
	}
}

// An index whose body breaks off is resumed where it stopped, not started
// over: three answers cut after 2,000 bytes each cost one request a cut, and
// the file read is the file's. Answers with no validator start over.
func TestIndexResumed(t *testing.T) {
	data := bytes.Repeat([]byte(`{"weight_map":{"a":"model-00001-of-00002.safetensors"}}`), 1000)
	for _, c := range []struct {
		etag   string
		ranges []string
	}{
		{`"v1"`, []string{"", "bytes=2000-", "bytes=4000-", "bytes=6000-"}},
		{"", []string{"", "", "", ""}},
	} {
		var ranges rangeLog
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := ranges.add(r)
			if c.etag != "" {
				w.Header().Set("ETag", c.etag)
			}
			if n > 3 {
				http.ServeContent(w, r, "index.json", time.Time{}, bytes.NewReader(data))
				return
			}
			start := 0
			if rng := r.Header.Get("Range"); rng != "" {
				fmt.Sscanf(rng, "bytes=%d-", &start)
				w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(data)-1, len(data)))
				w.Header().Set("Content-Length", strconv.Itoa(len(data)-start))
				w.WriteHeader(206)
			} else {
				w.Header().Set("Content-Length", strconv.Itoa(len(data)))
				w.WriteHeader(200)
			}
			w.Write(data[start : start+2000])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection drops mid-body
		}))
		got, err := readIndexAt(t, srv.URL)
		srv.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("etag %q: read through three cuts: %v (%d of %d bytes)", c.etag, err, len(got), len(data))
		}
		if !slices.Equal(ranges.got(), c.ranges) {
			t.Errorf("etag %q: requests' ranges %q, want %q", c.etag, ranges.got(), c.ranges)
		}
	}
}

// A body cut after its last byte (a chunked answer without its end) leaves
// nothing to resume: the Range request for the rest is answered 416, and
// the next attempt reads the file whole instead of failing.
func TestIndexResumedAtItsEnd(t *testing.T) {
	data := bytes.Repeat([]byte(`{"weight_map":{}}`), 2000)
	var ranges rangeLog
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := ranges.add(r)
		w.Header().Set("ETag", `"v1"`)
		if n == 1 {
			w.WriteHeader(200) // chunked: no Content-Length
			w.Write(data)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the final chunk never comes
		}
		http.ServeContent(w, r, "index.json", time.Time{}, bytes.NewReader(data))
	}))
	defer srv.Close()
	got, err := readIndexAt(t, srv.URL)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read: %v (%d of %d bytes)", err, len(got), len(data))
	}
	if want := []string{"", fmt.Sprintf("bytes=%d-", len(data)), ""}; !slices.Equal(ranges.got(), want) {
		t.Errorf("requests' ranges %q, want %q", ranges.got(), want)
	}
}

// rangeLog records each request's Range header, in order.
type rangeLog struct {
	mu     sync.Mutex
	ranges []string
}

// add records r's Range and returns how many requests there have been.
func (l *rangeLog) add(r *http.Request) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ranges = append(l.ranges, r.Header.Get("Range"))
	return len(l.ranges)
}

func (l *rangeLog) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ranges)
}

// readIndexAt reads org/name's index from the hub at url with a client that
// retries four times, quickly.
func readIndexAt(t *testing.T, url string) ([]byte, error) {
	t.Helper()
	c, err := hub.NewClient(hub.WithEndpoint(url), hub.WithRetries(4), hub.WithBackoff(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return c.OpenRepo(context.Background(), "org/name", "").ReadFile(context.Background(), "model.safetensors.index.json", 64<<20)
}
