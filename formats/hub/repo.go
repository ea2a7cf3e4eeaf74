package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Repo is a model repository on a hub.
type Repo struct {
	c    *Client
	ctx  context.Context
	ID   string // ORG/NAME
	Rev  string
	only string // when set, the repo is seen as holding just this file

	mu    sync.Mutex
	sizes map[string]int64       // from List
	open  map[string]*RemoteFile // one RemoteFile a path, so Prepare's lookups are reused
	pin   *commitPin             // the commit the revision names, from the first answer that says it
}

// OpenRepo returns a Source for ORG/NAME at a revision (default "main").
func (c *Client) OpenRepo(ctx context.Context, id, rev string) *Repo {
	if rev == "" {
		rev = "main"
	}
	return &Repo{c: c, ctx: ctx, ID: id, Rev: rev, pin: &commitPin{rev: rev}}
}

// OpenRepoFile returns a Source for one file of a repo: List names only that
// file, while ReadFile still finds the repo's config files beside it.
func (c *Client) OpenRepoFile(ctx context.Context, id, rev, path string) *Repo {
	r := c.OpenRepo(ctx, id, rev)
	r.only = path
	return r
}

// OneFile says whether the repo was opened on one of its files.
func (r *Repo) OneFile() bool { return r.only != "" }

// Name is ORG/NAME@REV.
func (r *Repo) Name() string {
	if r.only != "" {
		return r.ID + "@" + r.Rev + ":" + r.only
	}
	return r.ID + "@" + r.Rev
}

// Stats is the client's traffic.
func (r *Repo) Stats() Stats { return r.c.Stats() }

// ResolvedCommit is the commit the revision named when the hub first
// answered (X-Repo-Commit), which every later answer matched.
func (r *Repo) ResolvedCommit() string {
	r.pin.mu.Lock()
	defer r.pin.mu.Unlock()
	return r.pin.commit
}

type treeEntry struct {
	Type string `json:"type"`
	Path string `json:"path"`
	Size int64  `json:"size"`
	LFS  *struct {
		Size int64 `json:"size"`
	} `json:"lfs"`
}

// List reads the tree API (every page), falling back to the model info's
// siblings when the tree endpoint is missing.
func (r *Repo) List(ctx context.Context) ([]File, error) {
	if r.only != "" {
		all, err := r.listAll(ctx)
		if err != nil {
			return nil, err
		}
		var files []File
		for _, f := range all {
			if f.Path == r.only || f.Path == "config.json" || f.Path == "hf_quant_config.json" {
				files = append(files, f)
			}
		}
		if !slices.ContainsFunc(files, func(f File) bool { return f.Path == r.only }) {
			return nil, fmt.Errorf("%s: the repo has no file %q", r.Name(), r.only)
		}
		return files, nil
	}
	return r.listAll(ctx)
}

// maxListedFiles bounds a listing's files (the largest repos on the hub
// hold tens of thousands), so that a hub answering page after page cannot
// grow the list without end; maxListingPages bounds its requests.
const (
	maxListedFiles  = 1 << 20
	maxListingPages = 10_000
)

func (r *Repo) listAll(ctx context.Context) ([]File, error) {
	next := r.c.endpoint + "/api/models/" + r.ID + "/tree/" + url.PathEscape(r.Rev) + "?recursive=true"
	var files []File
	for pages := 0; next != ""; pages++ {
		if pages >= maxListingPages {
			return nil, fmt.Errorf("%s: listing: more than %d pages", r.Name(), maxListingPages)
		}
		var page []treeEntry
		link, err := r.getJSON(ctx, next, &page)
		if err != nil {
			var he *HTTPError
			if pages == 0 && errors.As(err, &he) && he.Status == 404 {
				return r.listSiblings(ctx, err)
			}
			return nil, fmt.Errorf("%s: listing: %w", r.Name(), err)
		}
		for _, e := range page {
			if e.Type != "file" {
				continue
			}
			size := e.Size
			if e.LFS != nil && e.LFS.Size > 0 {
				size = e.LFS.Size
			}
			files = append(files, File{Path: e.Path, Size: size})
		}
		if len(files) > maxListedFiles {
			return nil, fmt.Errorf("%s: listing: more than %d files", r.Name(), maxListedFiles)
		}
		cur := next
		if next = nextLink(link, cur); next == cur {
			return nil, fmt.Errorf("%s: listing: page %d links to itself as the next", r.Name(), pages+1)
		}
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	r.remember(files)
	return files, nil
}

func (r *Repo) remember(files []File) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sizes = make(map[string]int64, len(files))
	for _, f := range files {
		r.sizes[f.Path] = f.Size
	}
}

func (r *Repo) listSiblings(ctx context.Context, treeErr error) ([]File, error) {
	var info struct {
		Siblings []struct {
			RFilename string `json:"rfilename"`
			Size      *int64 `json:"size"`
		} `json:"siblings"`
	}
	if _, err := r.getJSON(ctx, r.c.endpoint+"/api/models/"+r.ID+"/revision/"+url.PathEscape(r.Rev), &info); err != nil {
		return nil, fmt.Errorf("%s: listing: %w", r.Name(), err)
	}
	files := make([]File, 0, len(info.Siblings))
	for _, s := range info.Siblings {
		size := int64(-1)
		if s.Size != nil {
			size = *s.Size
		}
		files = append(files, File{Path: s.RFilename, Size: size})
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	r.remember(files)
	return files, nil
}

// nextLink finds rel="next" in a Link header, resolved against the current URL.
func nextLink(link, cur string) string {
	for _, part := range strings.Split(link, ",") {
		seg := strings.Split(part, ";")
		if len(seg) < 2 {
			continue
		}
		isNext := false
		for _, p := range seg[1:] {
			if strings.ReplaceAll(strings.TrimSpace(p), " ", "") == `rel="next"` || strings.TrimSpace(p) == "rel=next" {
				isNext = true
			}
		}
		if !isNext {
			continue
		}
		u := strings.Trim(strings.TrimSpace(seg[0]), "<>")
		base, err1 := url.Parse(cur)
		ref, err2 := url.Parse(u)
		if err1 != nil || err2 != nil {
			return ""
		}
		return base.ResolveReference(ref).String()
	}
	return ""
}

const maxListing = 256 << 20

func (r *Repo) getJSON(ctx context.Context, u string, v any) (link string, err error) {
	err = r.c.do(ctx, func(ctx context.Context) error {
		resp, _, err := r.c.roundTrip(ctx, u, "")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxListing+1))
		if err != nil {
			return fmt.Errorf("GET %s: %w", redact(u), err)
		}
		if len(b) > maxListing {
			return &permanentError{fmt.Errorf("GET %s: listing larger than %d bytes", redact(u), maxListing)}
		}
		if err := json.Unmarshal(b, v); err != nil {
			return &permanentError{fmt.Errorf("GET %s: not the JSON the hub API returns: %v", redact(u), err)}
		}
		link = resp.Get("link")
		return nil
	})
	return link, err
}

// ReadFile downloads a small file of the repo. A body that breaks off is
// resumed where it stopped (a Range request for the rest) when the answers
// carry the same strong validator, as RemoteFile.fetch resumes: a 17 MB
// index on a flaky link is not started over at every cut.
func (r *Repo) ReadFile(ctx context.Context, p string, limit int64) ([]byte, error) {
	u := r.c.resolveURL(r.ID, r.Rev, p)
	var out []byte
	var buf bytes.Buffer // what earlier attempts got
	var bufMeta meta
	err := r.c.do(ctx, func(ctx context.Context) error {
		rng := ""
		if buf.Len() > 0 && validated(bufMeta) {
			rng = fmt.Sprintf("bytes=%d-", buf.Len())
		} else {
			buf.Reset()
		}
		resp, m, err := r.c.roundTrip(ctx, u, rng)
		if err != nil && rng != "" {
			// The resumed request itself failed (a 416 when the cut came
			// after the last byte, a server that refuses the range): the
			// next attempt starts over, as one without the bytes would.
			at := buf.Len()
			buf.Reset()
			bufMeta = meta{}
			return fmt.Errorf("resuming %s at byte %d: %s", p, at, err.Error())
		}
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := r.pin.check(p, m.commit); err != nil {
			return err
		}
		resumedAt := -1
		if rng != "" {
			start, _, _, ok := parseContentRange(resp.Get("content-range"))
			if same, known := sameVersion(bufMeta, m); resp.Status != 206 || !ok || start != int64(buf.Len()) || !same || !known {
				buf.Reset() // not the rest of the same bytes: this answer starts over
				if resp.Status != 200 {
					bufMeta = meta{}
					return fmt.Errorf("GET %s: resuming at byte %d: the answer is not the rest of the same file", redact(u), start)
				}
			}
		}
		if rng != "" && buf.Len() > 0 {
			resumedAt = buf.Len()
		}
		if buf.Len() == 0 {
			bufMeta = m
			// Room for the Content-Length up front, not ReadAll's doublings
			// (a large index is tens of MB). The length only sizes the
			// buffer: a browser keeps the header of a body it decompressed.
			if n, err := strconv.ParseInt(resp.Get("content-length"), 10, 64); err == nil && n >= 0 && n <= limit {
				buf.Grow(int(n) + bytes.MinRead)
			}
		}
		if _, err := buf.ReadFrom(io.LimitReader(resp.Body, limit+1-int64(buf.Len()))); err != nil {
			if resumedAt >= 0 && buf.Len() == resumedAt {
				buf.Reset() // a resumed answer that brought nothing: start over next time
				bufMeta = meta{}
			}
			return fmt.Errorf("GET %s: %w", redact(u), err)
		}
		b := buf.Bytes()
		if int64(len(b)) > limit {
			return &permanentError{fmt.Errorf("%s: %w (%d bytes)", p, ErrTooLarge, limit)}
		}
		out = b
		return nil
	})
	var he *HTTPError
	if errors.As(err, &he) && he.Status == 404 {
		return nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", r.Name(), p, err)
	}
	return out, nil
}

// Open returns a RemoteFile for a file of the repo. When the size is not
// known from the listing, the first read of the file tells it.
func (r *Repo) Open(ctx context.Context, p string) (io.ReaderAt, int64, error) {
	return r.c.primeSize(r.file(ctx, p))
}

func (r *Repo) file(ctx context.Context, p string) *RemoteFile {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.open[p]; ok {
		return f
	}
	size, ok := r.sizes[p]
	if !ok {
		size = -1
	}
	if r.open == nil {
		r.open = map[string]*RemoteFile{}
	}
	f := r.c.NewRemoteFile(r.ctx, r.c.resolveURL(r.ID, r.Rev, p), p, size)
	f.pin = r.pin
	r.open[p] = f
	return f
}

// Prepare looks up, in the background, where the hub redirects each file,
// so that the lookups overlap the reading of the index and configs; the
// later reads then go straight to the CDN. It costs the same requests as
// letting the first read follow the redirect.
//
// The lookups leave a few of the client's request slots free, so that the
// config and index requests made meanwhile are not queued behind them.
//
// With a Fetcher that follows redirects itself (RedirectFollower) it does
// nothing: a lookup would cost the redirect and a read at its target.
func (r *Repo) Prepare(ctx context.Context, paths []string) {
	if f, ok := r.c.fetcher.(RedirectFollower); ok && f.FollowsRedirects() {
		return
	}
	files := make(chan *RemoteFile, len(paths))
	for _, p := range paths {
		files <- r.file(ctx, p)
	}
	close(files)
	for range max(1, cap(r.c.sem)-4) {
		go func() {
			for f := range files {
				f.resolve()
			}
		}()
	}
}

// primeSize makes the first read of a file of unknown size: the default
// prefix, which the header reader then finds in the cache.
func (c *Client) primeSize(f *RemoteFile) (io.ReaderAt, int64, error) {
	if s := f.Size(); s >= 0 {
		return f, s, nil
	}
	buf := make([]byte, c.prefix)
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, err
	}
	return f, f.Size(), nil
}

// URLFile is one file at a plain http(s) URL.
type URLFile struct {
	c   *Client
	ctx context.Context
	URL string
}

// OpenURL returns a Source holding the one file at u.
func (c *Client) OpenURL(ctx context.Context, u string) *URLFile {
	return &URLFile{c: c, ctx: ctx, URL: u}
}

// Name is the URL.
func (u *URLFile) Name() string { return redact(u.URL) }

// Stats is the client's traffic.
func (u *URLFile) Stats() Stats { return u.c.Stats() }

func (u *URLFile) base() string {
	p, err := url.Parse(u.URL)
	if err != nil {
		return "model.safetensors"
	}
	return p.Path[strings.LastIndexByte(p.Path, '/')+1:]
}

// List names the one file; its size comes with the first read.
func (u *URLFile) List(ctx context.Context) ([]File, error) {
	return []File{{Path: u.base(), Size: -1}}, nil
}

// ReadFile finds no config files beside a bare URL.
func (u *URLFile) ReadFile(ctx context.Context, p string, limit int64) ([]byte, error) {
	return nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
}

// Open returns the file.
func (u *URLFile) Open(ctx context.Context, p string) (io.ReaderAt, int64, error) {
	if p != u.base() {
		return nil, 0, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	}
	return u.c.primeSize(u.c.NewRemoteFile(ctx, u.URL, u.base(), -1))
}
