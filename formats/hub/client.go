package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultEndpoint is the Hugging Face hub.
const DefaultEndpoint = "https://huggingface.co"

// Defaults of a Client, each changed by an Option.
const (
	DefaultParallel = 20               // requests in flight
	DefaultRetries  = 4                // extra attempts after a temporary failure
	DefaultTimeout  = 30 * time.Second // a request without progress: to its headers, or between body bytes
	DefaultPrefix   = 100_000          // first read of a header of unknown size
	maxRedirects    = 5
	maxErrorBody    = 64 << 10
)

// Client reads files from a hub over a Fetcher: retries, redirects, a bound
// on requests in flight, and traffic counters. Safe for concurrent use.
type Client struct {
	endpoint string
	token    string
	fetcher  Fetcher
	retries  int
	timeout  time.Duration
	prefix   int64
	backoff  time.Duration
	// readAhead widens a stream's reads (WithReadAhead); 0: off
	readAhead int64
	spares    chan []byte // read-ahead buffers the file caches let go (remember)
	sem       chan struct{}
	requests  atomic.Int64
	bytes     atomic.Int64

	// pauseUntil is when the hub, having answered one request 429 or 503
	// with a time to wait, may be asked again: every attempt of this client
	// waits it out (its CDN reads too: an attempt does not know its host
	// before it starts), not only the one told, so that 80 shard reads do
	// not each run into the limit in turn.
	pauseMu    sync.Mutex
	pauseUntil time.Time
}

type options struct {
	endpoint, token string
	endpointSet     bool
	fetcher         Fetcher
	parallel        int
	retries         int
	timeout         time.Duration
	prefix          int64
	backoff         time.Duration
	readAhead       int64
}

// Option configures a Client.
type Option func(*options) error

// WithEndpoint sets the hub (default DefaultEndpoint). Given twice with
// different values it is an error.
func WithEndpoint(endpoint string) Option {
	return func(o *options) error {
		e := strings.TrimRight(endpoint, "/")
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("hub: endpoint %q is not an http(s) URL", endpoint)
		}
		if o.endpointSet && o.endpoint != e {
			return fmt.Errorf("hub: two endpoints given: %q and %q", o.endpoint, e)
		}
		o.endpoint, o.endpointSet = e, true
		return nil
	}
}

// WithToken sends "Authorization: Bearer TOKEN" to the hub (never logged).
func WithToken(token string) Option {
	return func(o *options) error { o.token = strings.TrimSpace(token); return nil }
}

// WithFetcher sets the transport (default: net/http natively).
func WithFetcher(f Fetcher) Option {
	return func(o *options) error {
		if f == nil {
			return errors.New("hub: nil Fetcher")
		}
		o.fetcher = f
		return nil
	}
}

// WithParallel bounds requests in flight (default 20).
func WithParallel(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("hub: parallel must be at least 1, not %d", n)
		}
		o.parallel = n
		return nil
	}
}

// WithRetries sets how many times a temporary failure is retried (default 4).
func WithRetries(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return fmt.Errorf("hub: retries must not be negative")
		}
		o.retries = n
		return nil
	}
}

// WithTimeout bounds how long a request may go without progress (default
// 30 s): until its response headers, then between two reads of its body
// that bring bytes. A large body on a slow link takes as long as it needs
// while bytes keep coming; a stalled one is cut off.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("hub: timeout must be positive")
		}
		o.timeout = d
		return nil
	}
}

// WithBackoff sets the first retry delay, doubled each time (default 250 ms).
func WithBackoff(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("hub: backoff must not be negative")
		}
		o.backoff = d
		return nil
	}
}

// WithDefaultPrefix sets the first read of a header whose size nothing
// bounds (default 100,000 bytes, enough for 97% of popular models).
func WithDefaultPrefix(n int64) Option {
	return func(o *options) error {
		if n < 8 {
			return fmt.Errorf("hub: prefix must hold at least the 8-byte header length")
		}
		o.prefix = n
		return nil
	}
}

// WithReadAhead widens a read that continues an earlier one (a module's
// bands, read in order) to n bytes, and lets the reads it covers wait for
// it: a stream over the network then costs one request in n bytes, not one
// a band. The file cache bounds what is held (40 MiB a file); a stream read with
// ReadAtWithin also keeps prefetchDepth blocks in flight ahead of it. Off by
// default: a page's sample reads want exactly their bytes.
func WithReadAhead(n int64) Option {
	return func(o *options) error {
		if n < 0 || n > cacheLimit {
			return fmt.Errorf("hub: read-ahead %d outside 0..%d", n, cacheLimit)
		}
		o.readAhead = n
		return nil
	}
}

// NewClient builds a Client. Without WithFetcher it needs the native Fetcher,
// which the wasm build does not have.
func NewClient(opts ...Option) (*Client, error) {
	o := options{endpoint: DefaultEndpoint, parallel: DefaultParallel, retries: DefaultRetries,
		timeout: DefaultTimeout, prefix: DefaultPrefix, backoff: 250 * time.Millisecond}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.fetcher == nil {
		o.fetcher = defaultFetcher()
		if o.fetcher == nil {
			return nil, errors.New("hub: no Fetcher on this platform; use WithFetcher")
		}
	}
	return &Client{endpoint: o.endpoint, token: o.token, fetcher: o.fetcher, retries: o.retries,
		timeout: o.timeout, prefix: o.prefix, backoff: o.backoff, readAhead: o.readAhead, spares: make(chan []byte, maxSpares), sem: make(chan struct{}, o.parallel)}, nil
}

// maxSpares bounds the read-ahead buffers a client keeps idle between reads
// (4 × 4 MiB by default).
const maxSpares = 4

// spare returns an idle read-ahead buffer, or nil.
func (c *Client) spare() []byte {
	select {
	case b := <-c.spares:
		return b
	default:
		return nil
	}
}

// putSpare keeps b, a buffer no one else holds, for the next read ahead
// when it is of the read-ahead's size and there is room.
func (c *Client) putSpare(b []byte) {
	if c.readAhead <= 0 || int64(cap(b)) != c.readAhead {
		return
	}
	select {
	case c.spares <- b[:0]:
	default:
	}
}

// Endpoint is the hub the client talks to.
func (c *Client) Endpoint() string { return c.endpoint }

// Stats is the traffic so far.
func (c *Client) Stats() Stats { return Stats{Requests: c.requests.Load(), Bytes: c.bytes.Load()} }

// HTTPError is a response that is not what was asked for.
type HTTPError struct {
	URL        string
	Status     int
	Msg        string
	RetryAfter time.Duration
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("GET %s: HTTP %d: %s", e.URL, e.Status, e.Msg)
}

// Temporary reports whether retrying may succeed (408, 429 and 5xx, as
// huggingface_hub retries).
func (e *HTTPError) Temporary() bool { return e.Status == 408 || e.Status == 429 || e.Status >= 500 }

// ErrChanged is wrapped when a file's ETag differs between two reads.
var ErrChanged = errors.New("file changed between reads")

// meta is what a response says about the file it comes from.
type meta struct {
	// linked is the hub's X-Linked-ETag (on its redirect), etag the ETag of
	// the response that carried the bytes. They may be spelled differently
	// (a CDN's multipart ETag), so each is compared only with its own kind.
	linked string
	etag   string
	size   int64 // -1 when unknown
	final  string
	commit string // the hub's X-Repo-Commit: the commit the revision named when it answered
}

// countingBody counts body bytes as they are read.
type countingBody struct {
	r  io.ReadCloser
	c  *Client
	wd *watchdog // nil outside do
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.c.bytes.Add(int64(n))
	if n > 0 && b.wd != nil {
		b.wd.t.Reset(b.wd.d)
	}
	return n, err
}

func (b *countingBody) Close() error { return b.r.Close() }

// roundTrip sends one GET, following redirects itself (each hop counted).
// On success the response is 200 or 206 and its body is counted.
func (c *Client) roundTrip(ctx context.Context, u, rng string) (*Response, meta, error) {
	m := meta{size: -1}
	var visited []string
	for hop := 0; ; hop++ {
		req := Request{URL: u, Range: rng}
		if c.token != "" && sameHost(u, c.endpoint) {
			req.Header = map[string]string{"Authorization": "Bearer " + c.token}
		}
		c.requests.Add(1)
		resp, err := c.fetcher.Fetch(ctx, req)
		if err != nil {
			// url.Error's text repeats the URL (unredacted): its cause alone,
			// kept permanent where it was
			if ue, ok := err.(*url.Error); ok {
				err = ue.Err
			} else if pe, ok := err.(*permanentError); ok {
				if ue, ok := pe.error.(*url.Error); ok {
					err = &permanentError{ue.Err}
				}
			}
			return nil, m, fmt.Errorf("GET %s: %w", redact(u), err)
		}
		if resp.Redirected {
			c.requests.Add(1)
		}
		if e := resp.Get("x-linked-etag"); e != "" && m.linked == "" {
			m.linked = e
		}
		if e := resp.Get("x-repo-commit"); e != "" && m.commit == "" {
			m.commit = e
		}
		if s := resp.Get("x-linked-size"); s != "" && m.size < 0 {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				m.size = n
			}
		}
		switch resp.Status {
		case 200, 206:
			m.etag = resp.Get("etag")
			m.final = resp.URL
			wd, _ := ctx.Value(watchdogKey{}).(*watchdog)
			resp.Body = &countingBody{r: resp.Body, c: c, wd: wd}
			return resp, m, nil
		case 301, 302, 303, 307, 308:
			loc := resp.Get("location")
			drain(resp.Body, c)
			if loc == "" {
				return nil, m, &HTTPError{URL: redact(u), Status: resp.Status, Msg: "redirect without a Location"}
			}
			next, err := url.Parse(loc)
			if err != nil {
				return nil, m, &HTTPError{URL: redact(u), Status: resp.Status, Msg: "bad Location " + loc}
			}
			base, _ := url.Parse(u)
			abs := base.ResolveReference(next)
			if abs.Scheme != "http" && abs.Scheme != "https" {
				return nil, m, &HTTPError{URL: redact(u), Status: resp.Status, Msg: fmt.Sprintf("redirect to a %q URL, which is not HTTP", abs.Scheme)}
			}
			to := abs.String()
			if slices.Contains(visited, to) || to == u {
				return nil, m, &HTTPError{URL: redact(u), Status: resp.Status, Msg: loopMessage(u, to)}
			}
			if hop >= maxRedirects {
				return nil, m, &HTTPError{URL: redact(u), Status: resp.Status, Msg: fmt.Sprintf("more than %d redirects", maxRedirects)}
			}
			visited = append(visited, u)
			u = to
			continue
		}
		return nil, m, c.statusError(u, resp)
	}
}

// loopMessage names a redirect loop: a URL that redirects to itself, or
// back to one already visited.
func loopMessage(from, to string) string {
	if from == to {
		return "redirect loop: the URL redirects to itself"
	}
	return "redirect loop: redirected back to " + redact(to)
}

// redirectTarget sends one GET (asking for a single byte) and reports where
// the hub redirects it, following no hop; a file served in place is its own
// target.
func (c *Client) redirectTarget(ctx context.Context, u string) (string, meta, error) {
	m := meta{size: -1}
	req := Request{URL: u, Range: "bytes=0-0"}
	if c.token != "" && sameHost(u, c.endpoint) {
		req.Header = map[string]string{"Authorization": "Bearer " + c.token}
	}
	c.requests.Add(1)
	resp, err := c.fetcher.Fetch(ctx, req)
	if err != nil {
		return "", m, fmt.Errorf("GET %s: %w", redact(u), err)
	}
	if resp.Redirected { // the browser followed it: resp.URL is the target
		c.requests.Add(1)
		drain(resp.Body, c)
		return resp.URL, m, nil
	}
	m.linked = resp.Get("x-linked-etag")
	m.commit = resp.Get("x-repo-commit")
	if s := resp.Get("x-linked-size"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			m.size = n
		}
	}
	switch resp.Status {
	case 200, 206:
		drain(resp.Body, c)
		return u, m, nil
	case 301, 302, 303, 307, 308:
		drain(resp.Body, c)
		next, err := url.Parse(resp.Get("location"))
		if err != nil || resp.Get("location") == "" {
			return "", m, &HTTPError{URL: redact(u), Status: resp.Status, Msg: "redirect without a usable Location"}
		}
		base, _ := url.Parse(u)
		to := base.ResolveReference(next).String()
		if to == u {
			return "", m, &HTTPError{URL: redact(u), Status: resp.Status, Msg: loopMessage(u, to)}
		}
		return to, m, nil
	}
	return "", m, c.statusError(u, resp)
}

func drain(b io.ReadCloser, c *Client) {
	if b == nil {
		return
	}
	n, _ := io.Copy(io.Discard, io.LimitReader(b, maxErrorBody))
	c.bytes.Add(n)
	b.Close()
}

func (c *Client) statusError(u string, resp *Response) *HTTPError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	c.bytes.Add(int64(len(body)))
	resp.Body.Close()
	e := &HTTPError{URL: redact(u), Status: resp.Status}
	msg := strings.Join(strings.Fields(string(body)), " ")
	var j struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &j) == nil && strings.TrimSpace(j.Error) != "" {
		msg = strings.Join(strings.Fields(j.Error), " ") // the hub's {"error": "..."}: its words, not its JSON
	} else if isHTML(resp.Get("content-type"), body) {
		// a web page, not the hub's API: its markup says nothing useful
		msg = "the server answered with a web page, not the Hugging Face hub's API: is the endpoint a hub?"
	}
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	code, hubMsg := resp.Get("x-error-code"), strings.TrimSpace(resp.Get("x-error-message"))
	switch {
	case (resp.Status == 401 || resp.Status == 403) && code == "GatedRepo":
		e.Msg = "the repo is gated: request access on its page with the account whose token you give (--token or HF_TOKEN)"
	case resp.Status == 401 && strings.HasPrefix(hubMsg, "Invalid credentials"):
		e.Msg = "the token was refused (invalid credentials): check --token or HF_TOKEN"
	case resp.Status == 401 || code == "RepoNotFound":
		// The hub answers 401 alike for a repo that does not exist and for
		// a private or gated one read without a token (huggingface_hub
		// reads both as RepoNotFound).
		e.Msg = "repository not found: check ORG/NAME, or, if it is private or gated, give a token that can read it (--token or HF_TOKEN)"
		if c.token != "" {
			e.Msg = "repository not found, or private or gated and the token given cannot read it: check ORG/NAME and the token's access"
		}
	case resp.Status == 403:
		e.Msg = "forbidden: the repo needs a token with access (--token or HF_TOKEN)"
		if c.token != "" {
			e.Msg = "forbidden: the token given has no access to this repo (a fine-grained token needs read access to it)"
		}
	}
	if e.Msg != "" && hubMsg != "" && len(hubMsg) <= 200 {
		e.Msg += " (hub: " + hubMsg + ")"
	}
	switch resp.Status {
	case 401, 403:
	case 404:
		e.Msg = "not found"
		if resp.Get("x-error-code") == "RevisionNotFound" {
			e.Msg, msg = "revision not found (the repo has no such branch, tag or commit)", ""
		}
	case 416:
		e.Msg = "range not satisfiable (" + resp.Get("content-range") + ")"
	case 408:
		e.Msg = "request timeout"
	case 429:
		e.Msg = "rate limited"
	default:
		e.Msg = "unexpected status"
	}
	if msg != "" && resp.Status != 401 && resp.Status != 403 {
		e.Msg += ": " + msg
	}
	e.RetryAfter = retryAfter(resp.Get("retry-after"))
	if e.RetryAfter == 0 && resp.Status == 429 {
		e.RetryAfter = rateLimitReset(resp.Get("ratelimit"))
	}
	return e
}

// isHTML tells an HTML page (a web server's or a proxy's error page) by its
// content type or its first bytes.
func isHTML(contentType string, body []byte) bool {
	if strings.HasPrefix(strings.ToLower(strings.TrimSpace(contentType)), "text/html") {
		return true
	}
	b := strings.ToLower(strings.TrimSpace(string(body[:min(len(body), 64)])))
	return strings.HasPrefix(b, "<!doctype html") || strings.HasPrefix(b, "<html")
}

// redact drops query strings (CDN signatures) from URLs shown to people.
func redact(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}

// sameHost says whether a request to a may carry the endpoint b's token:
// the same host and the same scheme (a redirect from https to http on the
// same host would send it in clear).
func sameHost(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && ua.Host == ub.Host && strings.EqualFold(ua.Scheme, ub.Scheme)
}

// resolveURL is the hub URL of a file of a repo.
func (c *Client) resolveURL(repo, rev, path string) string {
	return c.endpoint + "/" + repo + "/resolve/" + url.PathEscape(rev) + "/" + escapePath(path)
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}
