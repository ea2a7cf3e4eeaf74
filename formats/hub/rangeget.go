package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The HTTP side of a RemoteFile: one ranged GET (readRange), an exact read
// that resumes a broken body when the answers' validators match (fetch),
// and the Content-Range and validator rules they share with Repo.ReadFile.

// fetch gets exactly n bytes at off (fewer only at the end of the file).
//
// An attempt whose body breaks off keeps the bytes it got, and the retry
// asks only for the rest, when both answers carry the same validator (the
// same X-Linked-ETag, or the same ETag): a 2 GB tensor cut at 1.9 GB costs
// 100 MB more, not 2 GB. Two answers with different validators are two
// versions of the file (ErrChanged); answers with none start over.
//
// buf, when not nil, is room to read into (a spare read-ahead buffer).
func (f *RemoteFile) fetch(off, n int64, buf []byte) ([]byte, error) {
	f.waitResolve()
	var out []byte
	have := buf[:0] // [off, off+len(have)) from earlier attempts
	var haveMeta meta
	err := f.c.do(f.ctx, func(ctx context.Context) error {
		f.mu.Lock()
		u := f.resolved
		f.mu.Unlock()
		if u == "" {
			u = f.url
		}
		if len(have) > 0 && !validated(haveMeta) {
			have = have[:0] // nothing to tell the versions apart by
		}
		prior := len(have)
		data, m, err := f.c.readRange(ctx, u, off+int64(prior), n-int64(prior), have)
		if err != nil && u != f.url {
			// A resolved CDN URL can expire: go back to the hub once.
			var he *HTTPError
			if errors.As(err, &he) && (he.Status == 403 || he.Status == 404 || he.Status == 410) {
				u = f.url
				data, m, err = f.c.readRange(ctx, u, off+int64(prior), n-int64(prior), have)
			}
		}
		if prior > 0 && len(data) > prior {
			if same, known := sameVersion(haveMeta, m); !same && known {
				return fmt.Errorf("%s: resuming at byte %d, the server sent another version of the file (validator %q, earlier %q): %w",
					f.name, off+int64(prior), m.linked+m.etag, haveMeta.linked+haveMeta.etag, ErrChanged)
			} else if !known {
				have, haveMeta = have[:0], meta{}
				return fmt.Errorf("%s: resuming at byte %d: the answer carries no validator to match the bytes before it", f.name, off+int64(prior))
			}
		}
		if err != nil {
			if len(data) > prior && prior == 0 {
				haveMeta = m
			}
			have = data
			return fmt.Errorf("%s: %w", f.name, err)
		}
		if err := f.pin.check(f.name, m.commit); err != nil {
			return err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, e := range []struct {
			got  string
			seen *string
			kind string
		}{{m.etag, &f.etag, "ETag"}, {m.linked, &f.linked, "X-Linked-ETag"}} {
			if e.got == "" {
				continue
			}
			if *e.seen != "" && *e.seen != e.got {
				return fmt.Errorf("%s: %s %s, earlier %s: %w (never mixing two versions of a file)", f.name, e.kind, e.got, *e.seen, ErrChanged)
			}
			*e.seen = e.got
		}
		if m.size >= 0 {
			if f.size >= 0 && f.size != m.size {
				return fmt.Errorf("%s: the server sending its bytes says %d bytes, %s said %d: %w", f.name, m.size, f.sizeFrom, f.size, ErrChanged)
			}
			f.size, f.sizeFrom = m.size, "an earlier answer"
		}
		if m.final != "" {
			f.resolved = m.final
		}
		out = data
		return nil
	})
	return out, err
}

// sameVersion compares the validators two answers carry, each kind with its
// own (a hub's X-Linked-ETag and a CDN's ETag may be spelled differently);
// known is false when they share none.
// A weak ETag (W/"…") promises no byte-for-byte sameness, so it joins no
// bytes (RFC 9110, 8.8.3).
func sameVersion(a, b meta) (same, known bool) {
	if strong(a.linked) && strong(b.linked) {
		return a.linked == b.linked, true
	}
	if strong(a.etag) && strong(b.etag) {
		return a.etag == b.etag, true
	}
	return false, false
}

// validated says whether an answer carries a strong validator, by which
// bytes kept from it can be joined to a later answer's.
func validated(m meta) bool { return strong(m.linked) || strong(m.etag) }

func strong(etag string) bool { return etag != "" && !strings.HasPrefix(etag, "W/") }

// maxSkip is how far into a full-body answer (a server that ignores Range)
// a read goes to reach its bytes; a header or a tensor further in is
// refused rather than downloading a shard's gigabytes before it.
const maxSkip = 64 << 20

// readRange sends one ranged GET (plus redirect hops) and appends the body
// to have, returning it extended; on an error, by the bytes that did arrive
// (a broken-off body's first part, which a retry may keep). A server that
// ignores Range and answers 200 is read only as far as needed, and no
// further than maxSkip into the file.
func (c *Client) readRange(ctx context.Context, u string, off, n int64, have []byte) ([]byte, meta, error) {
	resp, m, err := c.roundTrip(ctx, u, fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	if err != nil {
		return have, m, err
	}
	defer resp.Body.Close()
	// A body sent encoded (gzip, br) is not the file's bytes at these
	// offsets; Go's transport decodes only what it asked for itself.
	if ce := strings.TrimSpace(resp.Get("content-encoding")); ce != "" && !strings.EqualFold(ce, "identity") {
		return have, m, &permanentError{fmt.Errorf("GET %s: the server sent bytes %d-%d with Content-Encoding %q, not the file's own bytes", redact(u), off, off+n-1, ce)}
	}
	skip := int64(0)
	switch resp.Status {
	case 206:
		start, end, total, ok := parseContentRange(resp.Get("content-range"))
		if !ok || start != off || end < start {
			return have, m, &permanentError{fmt.Errorf("GET %s: Content-Range %q does not answer bytes=%d-%d", redact(u), resp.Get("content-range"), off, off+n-1)}
		}
		if total >= 0 {
			m.size = total
		}
		n = min(n, end-start+1)
	case 200:
		if off-int64(len(have)) > maxSkip { // the read's own start: a resumed one skips what it kept too
			return have, m, &permanentError{fmt.Errorf("GET %s: the server ignores Range (it answered 200, the whole file): reaching byte %d would download every byte before it; refused past %d MiB", redact(u), off, maxSkip>>20)}
		}
		skip = off // the whole file: read through to the range, then stop
		if cl := resp.Get("content-length"); cl != "" {
			if total, err := strconv.ParseInt(cl, 10, 64); err == nil {
				m.size = total
				n = max(min(n, total-off), 0)
			}
		}
	}
	if skip > 0 {
		if _, err := io.CopyN(io.Discard, resp.Body, skip); err != nil {
			return have, m, fmt.Errorf("GET %s: skipping to %d of a full-body answer: %w", redact(u), skip, err)
		}
	}
	prior := len(have)
	if int64(cap(have)-prior) < n {
		grown := make([]byte, prior, int64(prior)+n)
		copy(grown, have)
		have = grown
	}
	buf := have[prior : int64(prior)+n]
	got, err := io.ReadFull(resp.Body, buf)
	have = have[:prior+got]
	if err != nil && resp.Status == 200 && resp.Get("content-length") == "" && (err == io.EOF || err == io.ErrUnexpectedEOF) && ctx.Err() == nil {
		// The whole file, of no stated length, ended before the range did:
		// that is its size (as a Content-Length would have said).
		m.size = off + int64(got)
		return have, m, nil
	}
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil { // cancelled or timed out: say so, not "unexpected EOF"
			err = ctxErr
		} else if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return have, m, fmt.Errorf("GET %s: body ended after %d of %d bytes: %w", redact(u), got, n, err)
	}
	return have, m, nil
}

// parseContentRange reads "bytes a-b/size" (size may be "*").
func parseContentRange(v string) (start, end, total int64, ok bool) {
	rest, found := strings.CutPrefix(strings.TrimSpace(v), "bytes ")
	if !found {
		return 0, 0, 0, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, 0, false
	}
	a, b, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, 0, false
	}
	var err1, err2 error
	start, err1 = strconv.ParseInt(a, 10, 64)
	end, err2 = strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, 0, false
	}
	total = -1
	if tot != "*" {
		t, err := strconv.ParseInt(tot, 10, 64)
		if err != nil {
			return 0, 0, 0, false
		}
		total = t
	}
	return start, end, total, true
}
