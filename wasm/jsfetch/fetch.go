//go:build js && wasm

package jsfetch

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/hack-pad/safejs"
	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/wasm/session"
)

// Fetcher is a hub.Fetcher on the browser's fetch. It sends the Range header
// and, only when the client adds one, Authorization: a single range is
// CORS-safelisted, so reading from huggingface.co needs no preflight. It never
// sends HEAD. Each request has its own AbortController, aborted when the
// request's context ends (a new repo opened, a timeout).
type Fetcher struct{}

// headers the hub client reads; the browser exposes only those the server
// lists in Access-Control-Expose-Headers.
var wanted = []string{"content-range", "content-length", "etag", "x-linked-etag", "x-linked-size",
	"x-repo-commit", "link", "location", "retry-after", "content-type", "x-error-code", "x-error-message", "ratelimit"}

// FollowsRedirects: fetch() follows them (hub.RedirectFollower), so the
// client reads each file through its hub URL and lets the browser take the
// redirect, instead of looking the redirect up first.
func (Fetcher) FollowsRedirects() bool { return true }

// Fetch sends one GET through fetch().
func (Fetcher) Fetch(ctx context.Context, req hub.Request) (*hub.Response, error) {
	global := safejs.Global()
	ctlCtor, err := global.Get("AbortController")
	if err != nil {
		return nil, err
	}
	ctl, err := ctlCtor.New()
	if err != nil {
		return nil, err
	}
	signal, err := ctl.Get("signal")
	if err != nil {
		return nil, err
	}
	hdr := map[string]any{}
	if req.Range != "" {
		hdr["Range"] = req.Range
	}
	for k, v := range req.Header {
		hdr[k] = v
	}
	init := map[string]any{"method": "GET", "headers": hdr, "redirect": "follow", "credentials": "omit", "cache": "no-store"}
	initV, err := safejs.ValueOf(init)
	if err != nil {
		return nil, err
	}
	if err := initV.Set("signal", signal); err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	var once sync.Once
	finish := func() { once.Do(func() { close(stop) }) }
	go func() {
		select {
		case <-ctx.Done():
			ctl.Call("abort")
		case <-stop:
		}
	}()
	p, err := global.Call(fetchName(global), req.URL, initV)
	if err != nil {
		finish()
		return nil, &session.FetchError{Msg: fmt.Sprintf("fetch %s: %v", req.URL, err)}
	}
	resp, err := Await(p)
	if err != nil {
		finish()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// A TypeError: the network is down or CORS refused the answer.
		return nil, &session.FetchError{Msg: fmt.Sprintf("fetch %s: %v (the network failed, or the server's CORS headers do not allow this page)", req.URL, err)}
	}
	out := &hub.Response{Header: map[string]string{}}
	if out.Status, err = getInt(resp, "status"); err != nil {
		finish()
		return nil, err
	}
	out.URL, _ = getString(resp, "url")
	if out.URL == "" {
		out.URL = req.URL
	}
	if rv, err := resp.Get("redirected"); err == nil {
		out.Redirected, _ = rv.Bool()
	}
	headers, err := resp.Get("headers")
	if err != nil {
		finish()
		return nil, err
	}
	for _, h := range wanted {
		v, err := headers.Call("get", h)
		if err == nil && v.Type() == safejs.TypeString {
			out.Header[h], _ = v.String()
		}
	}
	body, err := resp.Get("body")
	if err != nil || body.IsNull() || body.IsUndefined() {
		finish()
		out.Body = io.NopCloser(&emptyReader{})
		return out, nil
	}
	reader, err := body.Call("getReader")
	if err != nil {
		finish()
		return nil, err
	}
	out.Body = &bodyReader{reader: reader, ctx: ctx, finish: finish, ctl: ctl}
	return out, nil
}

// fetchName is the function that sends requests: in the engine's Web
// Worker, quantscopeFetch (web/worker.js), which has the page's thread send
// them and hand over the bodies, so that parsing here and handling the
// responses there run side by side; elsewhere the browser's fetch.
func fetchName(global safejs.Value) string {
	if f, err := global.Get("quantscopeFetch"); err == nil && f.Type() == safejs.TypeFunction {
		return "quantscopeFetch"
	}
	return "fetch"
}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, io.EOF }

func getInt(v safejs.Value, p string) (int, error) {
	x, err := v.Get(p)
	if err != nil {
		return 0, err
	}
	return x.Int()
}

// bodyReader reads a ReadableStream chunk by chunk, so that a server that
// ignores Range is read only as far as the client needs before Close
// cancels the stream.
type bodyReader struct {
	reader safejs.Value
	ctx    context.Context
	ctl    safejs.Value
	finish func()
	buf    []byte
	done   bool
	closed bool
}

func (b *bodyReader) Read(p []byte) (int, error) {
	for len(b.buf) == 0 {
		if b.done {
			return 0, io.EOF
		}
		pr, err := b.reader.Call("read")
		if err != nil {
			return 0, err
		}
		r, err := Await(pr)
		if err != nil {
			if b.ctx.Err() != nil {
				return 0, b.ctx.Err()
			}
			return 0, &session.FetchError{Msg: fmt.Sprintf("reading the body: %v", err)}
		}
		doneV, err := r.Get("done")
		if err != nil {
			return 0, err
		}
		if d, _ := doneV.Bool(); d {
			b.done = true
			continue
		}
		chunk, err := r.Get("value")
		if err != nil {
			return 0, err
		}
		n, err := chunk.Length()
		if err != nil {
			return 0, err
		}
		if n <= len(p) { // straight into the caller's buffer: no copy in between
			if _, err := safejs.CopyBytesToGo(p[:n], chunk); err != nil {
				return 0, err
			}
			if n > 0 {
				return n, nil
			}
			continue
		}
		b.buf = make([]byte, n)
		if _, err := safejs.CopyBytesToGo(b.buf, chunk); err != nil {
			return 0, err
		}
	}
	n := copy(p, b.buf)
	b.buf = b.buf[n:]
	return n, nil
}

// Close stops the stream: the rest of the body is never downloaded.
func (b *bodyReader) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	defer b.finish()
	if !b.done {
		if p, err := b.reader.Call("cancel"); err == nil {
			Await(p) // settles at once; waiting keeps its callbacks alive until then
		}
	}
	return nil
}
