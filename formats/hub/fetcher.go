package hub

import (
	"context"
	"io"
	"strings"
)

// Request is one GET. Range is the value of a Range header ("bytes=0-99") or
// empty; Header holds any other header (Authorization when a token is set).
type Request struct {
	URL    string
	Range  string
	Header map[string]string
}

// Response is what a Fetcher got back. A Fetcher does not follow redirects
// when it can avoid it, so that the client can count each hop and read the
// hub's headers on the 302; one that cannot (the browser's fetch) sets
// Redirected and URL to the final location.
type Response struct {
	Status     int
	Header     map[string]string // lower-cased names
	Body       io.ReadCloser
	URL        string // the URL that answered
	Redirected bool   // the Fetcher followed a redirect itself
}

// Get returns a response header by name, any case.
func (r *Response) Get(name string) string { return r.Header[strings.ToLower(name)] }

// Fetcher sends one GET. Implementations: NetFetcher (net/http) natively,
// and one on the browser's fetch in wasm/.
type Fetcher interface {
	Fetch(ctx context.Context, req Request) (*Response, error)
}

// RedirectFollower is a Fetcher that follows redirects itself and cannot be
// told not to (the browser's fetch). Looking up where the hub redirects a
// file then costs the 302 and a read at the target, so the client makes no
// such lookups: the first read of each file follows the redirect, and later
// reads go to the URL that answered it.
type RedirectFollower interface {
	FollowsRedirects() bool
}
