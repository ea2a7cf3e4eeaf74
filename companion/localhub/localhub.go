// Package localhub is a small Hugging Face hub on a local directory: it
// serves DIR/ORG/NAME/... with the hub's URL layout (the model API, the
// recursive tree listing with pagination, resolve URLs with a 302 to a
// CDN-like path for LFS files, Range requests, CORS, gated repos), for tests,
// demos, benchmarks and offline use.
//
// It never reads more of a file than a request asks for, and no request
// path leaves DIR: ".." segments, encoded slashes and symlinks that point
// outside are refused.
package localhub

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// GatedFile, in a repo's folder, makes the repo gated: each line of it is a
// token the hub accepts. It is never listed or served.
const GatedFile = ".quantscope-gated"

// RevisionsFile, in a repo's folder, names the revisions (branches, tags)
// the folder's content answers to besides "main" and its commit id, one a
// line. Any other revision is a 404 "revision not found", as on the hub.
// It is never listed or served.
const RevisionsFile = ".quantscope-revisions"

// Fault is what the fault hook tells the server to do with one request.
type Fault struct {
	Status      int           // answer with this status (429, 500, ...) and no body
	RetryAfter  string        // Retry-After header with Status
	IgnoreRange bool          // answer 200 with the whole file
	ResetAfter  int64         // write this many body bytes, then cut the connection
	ETag        string        // send this ETag instead of the file's
	SlowBody    time.Duration // wait this long before writing the body
}

// Options configure a Server.
type Options struct {
	// Latency is added before every response (for benchmarks).
	Latency time.Duration
	// PageSize is the number of entries per tree page (default 1000).
	PageSize int
	// Faults, when set, is asked before each file response; n counts the
	// requests for that path so far (1 for the first).
	Faults func(r *http.Request, path string, n int) Fault
	// CDN, when set ("http://127.0.0.1:8091"), is the origin the resolve
	// URLs of LFS files redirect to, as the real hub's 302 points at another
	// host: the caller serves the same Server there too (it answers /cdn/...
	// on any origin, with CORS). Empty: the redirect stays on this origin.
	CDN string
	// AllowOrigin, when set, says which browser origins may read the hub
	// (CORS): the others get no Access-Control-Allow-Origin, and the browser
	// keeps the response from their pages. Nil allows every origin, as the
	// real hub does for its public repos. A request without an Origin (not
	// from a page) is answered either way.
	AllowOrigin func(origin string) bool
}

// Server serves a directory as a hub. It implements http.Handler.
type Server struct {
	root string
	opt  Options
	key  [32]byte // signs CDN URLs

	requests atomic.Int64
	bytes    atomic.Int64
	mu       sync.Mutex
	perPath  map[string]int
	listings map[string]listing // repo folder → its files, briefly cached
}

// New serves root. root must exist.
func New(root string, opt Options) (*Server, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return nil, fmt.Errorf("localhub: %w", err)
	}
	if opt.PageSize <= 0 {
		opt.PageSize = 1000
	}
	s := &Server{root: abs, opt: opt, perPath: map[string]int{}, listings: map[string]listing{}}
	if _, err := rand.Read(s.key[:]); err != nil {
		return nil, err
	}
	return s, nil
}

// route is a request path split into the hub's parts.
type route struct{ org, name, rev, path string }

// dispatch routes by hand: the hub's layout puts ORG first, which no
// pattern router can tell apart from /api and /cdn.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		httpError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	// Segments split before unescaping, so that only a revision's own
	// segment may hold a slash (refs%2Fpr%2F1).
	seg := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	for i, p := range seg {
		u, err := url.PathUnescape(p)
		if err != nil {
			httpError(w, http.StatusBadRequest, "invalid path")
			return
		}
		seg[i] = u
	}
	revAt := -1
	switch {
	case len(seg) > 5 && seg[0] == "api" && seg[1] == "models" && (seg[4] == "revision" || seg[4] == "tree"):
		revAt = 5
	case len(seg) > 3 && seg[0] == "cdn":
		revAt = 3
	case len(seg) > 3 && (seg[2] == "resolve" || seg[2] == "raw"):
		revAt = 3
	}
	for i, p := range seg {
		if i != revAt && strings.Contains(p, "/") {
			httpError(w, http.StatusBadRequest, "invalid path")
			return
		}
	}
	at := func(i int) string {
		if i < len(seg) {
			return seg[i]
		}
		return ""
	}
	rest := func(i int) string {
		if i < len(seg) {
			return strings.Join(seg[i:], "/")
		}
		return ""
	}
	switch {
	case at(0) == "api" && at(1) == "models" && len(seg) == 4:
		s.modelInfo(w, r, route{org: at(2), name: at(3)})
	case at(0) == "api" && at(1) == "models" && at(4) == "revision" && len(seg) == 6:
		s.modelInfo(w, r, route{org: at(2), name: at(3), rev: at(5)})
	case at(0) == "api" && at(1) == "models" && at(4) == "tree" && len(seg) >= 6:
		s.tree(w, r, route{org: at(2), name: at(3), rev: at(5), path: rest(6)})
	case at(0) == "cdn" && len(seg) >= 5:
		s.cdn(w, r, route{org: at(1), name: at(2), rev: at(3), path: rest(4)})
	case at(2) == "resolve" && len(seg) >= 5:
		s.resolve(w, r, route{org: at(0), name: at(1), rev: at(3), path: rest(4)})
	case at(2) == "raw" && len(seg) >= 5:
		s.cdn(w, r, route{org: at(0), name: at(1), rev: at(3), path: rest(4)})
	default:
		httpError(w, http.StatusNotFound, "not found")
	}
}

// Stats is what the server has answered: requests and body bytes written.
func (s *Server) Stats() (requests, bytes int64) { return s.requests.Load(), s.bytes.Load() }

// ResetStats zeroes the counters.
func (s *Server) ResetStats() {
	s.requests.Store(0)
	s.bytes.Store(0)
	s.mu.Lock()
	s.perPath = map[string]int{}
	s.mu.Unlock()
}

// ServeHTTP answers with CORS as the hub does (to the origins AllowOrigin
// lets in), then routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	h := w.Header()
	if o := r.Header.Get("Origin"); o != "" {
		h.Set("Vary", "Origin")
		if s.opt.AllowOrigin == nil || s.opt.AllowOrigin(o) {
			h.Set("Access-Control-Allow-Origin", o)
		}
	} else {
		h.Set("Access-Control-Allow-Origin", "*")
	}
	h.Set("Access-Control-Expose-Headers", "Content-Range, Content-Length, Accept-Ranges, ETag, X-Linked-Size, X-Linked-ETag, X-Repo-Commit, X-Error-Code, X-Error-Message, Link, Location")
	if r.Method == http.MethodOptions {
		h.Set("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Range, Authorization, Content-Type, If-None-Match")
		h.Set("Access-Control-Max-Age", "86400")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if s.opt.Latency > 0 {
		select {
		case <-time.After(s.opt.Latency):
		case <-r.Context().Done():
			return
		}
	}
	// Refuse encoded backslashes and dot segments before the router sees
	// them; an encoded slash is the router's to judge (a revision such as
	// refs/pr/1 travels as one segment, refs%2Fpr%2F1, as the hub's
	// clients send it).
	if strings.Contains(strings.ToLower(r.URL.RawPath), "%5c") || hasDotSegment(r.URL.EscapedPath()) {
		httpError(w, http.StatusBadRequest, "invalid path")
		return
	}
	s.dispatch(&countingWriter{ResponseWriter: w, n: &s.bytes}, r)
}

func hasDotSegment(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if u, err := url.PathUnescape(seg); err != nil || u == ".." || u == "." || strings.Contains(u, `\`) {
			return true
		}
	}
	return false
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// repoDir resolves ORG/NAME to its folder, checking it stays inside root.
func (s *Server) repoDir(org, name string) (string, bool) {
	for _, p := range []string{org, name} {
		if p == "" || p == "." || p == ".." || strings.ContainsAny(p, `/\`) || strings.HasPrefix(p, ".") {
			return "", false
		}
	}
	dir, ok := s.inside(filepath.Join(s.root, org, name))
	if !ok {
		return "", false
	}
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return "", false
	}
	return dir, true
}

// inside resolves symlinks and checks the result is under root.
func (s *Server) inside(p string) (string, bool) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", false
	}
	if real != s.root && !strings.HasPrefix(real, s.root+string(filepath.Separator)) {
		return "", false
	}
	return real, true
}

// signedKey marks, in a request's context, a CDN URL that resolve signed.
type signedKey struct{}

// sign is the signature resolve puts on a CDN URL: HMAC-SHA256 of its path
// and expiry under the server's random key.
func (s *Server) sign(cdnPath, expires string) string {
	m := hmac.New(sha256.New, s.key[:])
	m.Write([]byte(cdnPath + "?" + expires))
	return hex.EncodeToString(m.Sum(nil))
}

// authorized checks a gated repo's token.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request, dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, GatedFile))
	if err != nil {
		return true
	}
	if signed, _ := r.Context().Value(signedKey{}).(bool); signed {
		return true
	}
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	for _, line := range strings.Split(string(b), "\n") {
		if l := strings.TrimSpace(line); l != "" && tok == l {
			return true
		}
	}
	// As the hub answers: 401 without a token, 403 for a token without
	// access, both with X-Error-Code GatedRepo.
	w.Header().Set("X-Error-Code", "GatedRepo")
	if tok == "" {
		msg := "Access to this model is restricted. You must have access to it and be authenticated to access it."
		w.Header().Set("X-Error-Message", msg)
		httpError(w, http.StatusUnauthorized, msg)
		return false
	}
	msg := "Access to this model is restricted and you are not in the authorized list."
	w.Header().Set("X-Error-Message", msg)
	httpError(w, http.StatusForbidden, msg)
	return false
}

func (s *Server) modelInfo(w http.ResponseWriter, r *http.Request, rt route) {
	dir, files, ok := s.repo(w, r, rt)
	if !ok {
		return
	}
	sib := make([]map[string]any, len(files))
	for i, f := range files {
		sib[i] = map[string]any{"rfilename": f.path, "size": f.size}
	}
	_, gated := os.Stat(filepath.Join(dir, GatedFile))
	id := rt.org + "/" + rt.name
	writeJSON(w, map[string]any{"id": id, "modelId": id, "sha": commit(files),
		"private": false, "gated": gated == nil, "siblings": sib})
}

func (s *Server) tree(w http.ResponseWriter, r *http.Request, rt route) {
	_, files, ok := s.repo(w, r, rt)
	if !ok {
		return
	}
	sub := strings.Trim(rt.path, "/")
	recursive := r.URL.Query().Get("recursive") == "true" || r.URL.Query().Get("recursive") == "1"
	var list []map[string]any
	dirs := map[string]bool{}
	for _, f := range files {
		rel := f.path
		if sub != "" {
			if !strings.HasPrefix(rel, sub+"/") {
				continue
			}
			rel = strings.TrimPrefix(rel, sub+"/")
		}
		if !recursive && strings.Contains(rel, "/") {
			d := path.Join(sub, rel[:strings.IndexByte(rel, '/')])
			if !dirs[d] {
				dirs[d] = true
				list = append(list, map[string]any{"type": "directory", "path": d, "oid": commit(nil), "size": 0})
			}
			continue
		}
		e := map[string]any{"type": "file", "path": f.path, "size": f.size, "oid": strings.Trim(etagOf(f), `"`)}
		if isLFS(f.path) {
			e["lfs"] = map[string]any{"oid": strings.Trim(etagOf(f), `"`), "size": f.size, "pointerSize": 134}
		}
		list = append(list, e)
	}
	if recursive { // the hub lists folders too
		seen := map[string]bool{}
		for _, f := range files {
			for d := path.Dir(f.path); d != "." && !seen[d]; d = path.Dir(d) {
				seen[d] = true
				list = append(list, map[string]any{"type": "directory", "path": d, "oid": commit(nil), "size": 0})
			}
		}
	}
	start := 0
	if c := r.URL.Query().Get("cursor"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 0 || n > len(list) {
			httpError(w, http.StatusBadRequest, "bad cursor")
			return
		}
		start = n
	}
	end := min(start+s.opt.PageSize, len(list))
	if end < len(list) {
		q := r.URL.Query()
		q.Set("cursor", strconv.Itoa(end))
		next := *r.URL
		next.RawQuery = q.Encode()
		w.Header().Set("Link", fmt.Sprintf(`<%s>; rel="next"`, next.RequestURI()))
	}
	page := list[start:end]
	if page == nil {
		page = []map[string]any{}
	}
	writeJSON(w, page)
}

// repo finds a repo's folder and files for the API answers, checking gating.
func (s *Server) repo(w http.ResponseWriter, r *http.Request, rt route) (string, []entry, bool) {
	dir, ok := s.repoDir(rt.org, rt.name)
	if !ok {
		httpError(w, http.StatusNotFound, "Repository not found")
		return "", nil, false
	}
	if !s.authorized(w, r, dir) {
		return "", nil, false
	}
	files, err := s.files(dir)
	if err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return "", nil, false
	}
	if rt.rev != "" && !knownRevision(dir, files, rt.rev) {
		revisionNotFound(w, rt.rev)
		return "", nil, false
	}
	return dir, files, true
}

// revisionNotFound answers as the hub does for a branch, tag or commit the
// repo does not have.
func revisionNotFound(w http.ResponseWriter, rev string) {
	w.Header().Set("X-Error-Code", "RevisionNotFound")
	httpError(w, http.StatusNotFound, "Revision not found: "+rev)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// file finds a repo's file, checking gating and containment.
func (s *Server) file(w http.ResponseWriter, r *http.Request, rt route) (dir string, f entry, real string, ok bool) {
	org, name := rt.org, rt.name
	dir, found := s.repoDir(org, name)
	if !found {
		httpError(w, http.StatusNotFound, "Repository not found")
		return "", entry{}, "", false
	}
	if !s.authorized(w, r, dir) {
		return "", entry{}, "", false
	}
	if !knownRevision(dir, s.cachedFiles(dir), rt.rev) {
		revisionNotFound(w, rt.rev)
		return "", entry{}, "", false
	}
	p := rt.path
	if !fs.ValidPath(p) || strings.Contains(p, `\`) {
		httpError(w, http.StatusBadRequest, "invalid path")
		return "", entry{}, "", false
	}
	for _, seg := range strings.Split(p, "/") {
		if strings.HasPrefix(seg, ".") {
			httpError(w, http.StatusNotFound, "Entry not found")
			return "", entry{}, "", false
		}
	}
	real, inside := s.inside(filepath.Join(dir, filepath.FromSlash(p)))
	info, err := os.Stat(real)
	if !inside || err != nil || !info.Mode().IsRegular() {
		httpError(w, http.StatusNotFound, "Entry not found")
		return "", entry{}, "", false
	}
	return dir, entry{path: p, size: info.Size()}, real, true
}

func (s *Server) resolve(w http.ResponseWriter, r *http.Request, rt route) {
	dir, f, real, ok := s.file(w, r, rt)
	if !ok {
		return
	}
	files := s.cachedFiles(dir)
	h := w.Header()
	h.Set("X-Repo-Commit", commit(files))
	if isLFS(f.path) {
		h.Set("X-Linked-Size", strconv.FormatInt(f.size, 10))
		h.Set("X-Linked-ETag", etagOf(f))
		h.Set("ETag", etagOf(f))
		cdnPath := "/cdn/" + rt.org + "/" + rt.name + "/" + url.PathEscape(rt.rev) + "/" + escapePath(f.path)
		exp := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
		h.Set("Location", strings.TrimSuffix(s.opt.CDN, "/")+cdnPath+"?expires="+exp+"&sig="+s.sign(cdnPath, exp))
		w.WriteHeader(http.StatusFound)
		return
	}
	s.serveRange(w, r, f, real)
}

// cdn serves a file as the CDN does: a signed URL from resolve (which a
// browser follows without the Authorization header, dropped on a redirect to
// another origin) is its own authorization.
func (s *Server) cdn(w http.ResponseWriter, r *http.Request, rt route) {
	q := r.URL.Query()
	exp, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	if err == nil && time.Now().Unix() < exp && hmac.Equal([]byte(q.Get("sig")), []byte(s.sign(r.URL.EscapedPath(), q.Get("expires")))) {
		r = r.WithContext(context.WithValue(r.Context(), signedKey{}, true))
	}
	_, f, real, ok := s.file(w, r, rt)
	if !ok {
		return
	}
	s.serveRange(w, r, f, real)
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, x := range parts {
		parts[i] = url.PathEscape(x)
	}
	return strings.Join(parts, "/")
}
