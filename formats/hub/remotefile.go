package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// RemoteFile is an io.ReaderAt over HTTP Range requests. It fills the buffer
// or returns an error, is safe for parallel calls, follows the hub's redirect
// once and reuses the resolved URL, refuses to mix two versions of the file
// (ETag), and keeps recent ranges so that neighbouring reads do not refetch.
type RemoteFile struct {
	c    *Client
	ctx  context.Context
	url  string // the hub URL (resolve/...)
	name string // for messages

	mu             sync.Mutex
	resolved       string // the URL that last answered (the CDN's, after a redirect)
	etag           string // of the responses that carried bytes
	linked         string // the hub's X-Linked-ETag
	size           int64
	sizeFrom       string  // who said size (for a message when another answer disagrees)
	blocks         []block // most recent last
	cached         int64
	ends           [4]int64      // where the last reads ended: a read starting at one is a stream's next
	pending        []*pending    // reads ahead in flight
	prefetching    int           // of them, those no reader started (prefetch)
	prefetchFailed bool          // one did: no more (each would retry the same failure)
	resolving      chan struct{} // closed when a Prepare'd redirect lookup ends
	pin            *commitPin    // the repo's, for a file of a repo (nil for a lone URL)
}

// commitPin holds the commit a repo's revision named at its first answer
// (X-Repo-Commit): a branch that moves while a repo is read would
// otherwise mix the index of one commit with shards of another.
type commitPin struct {
	mu     sync.Mutex
	rev    string
	commit string
}

// check records the first commit and refuses another.
func (p *commitPin) check(name, commit string) error {
	if p == nil || commit == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.commit == "" {
		p.commit = commit
		return nil
	}
	if commit != p.commit {
		return fmt.Errorf("%s: revision %s was commit %s, then %s while the repo was read: %w (never mixing two commits; read again, or give --revision %s)",
			name, p.rev, short(p.commit), short(commit), ErrChanged, p.commit)
	}
	return nil
}

func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

type block struct {
	off   int64
	data  []byte
	lent  bool // ReadShared handed out a view of data: never reused
	ahead bool // read ahead of a stream: its reads keep the next in flight
	used  bool // a read took bytes from it (dropBehind lets only such go)
	// stream is the end of the stream it was read ahead for (ReadAtWithin's
	// end; 0 when none said): the stream's reads let its blocks behind go.
	stream int64
}

const (
	minRead    = 16 << 10 // small reads are widened to this, for neighbours
	cacheLimit = 40 << 20 // per file: two streams' blocks, the prefetchDepth after each, one behind each
)

// NewRemoteFile reads url, whose size is known (size ≥ 0) or learnt from the
// first response (size < 0). ctx bounds every read made through it.
func (c *Client) NewRemoteFile(ctx context.Context, url, name string, size int64) *RemoteFile {
	return &RemoteFile{c: c, ctx: ctx, url: url, name: name, size: size, sizeFrom: "the repo's listing"}
}

// Size is the file's size, -1 until a response has told it.
func (f *RemoteFile) Size() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.size
}

// ReadAt reads len(p) bytes at off.
func (f *RemoteFile) ReadAt(p []byte, off int64) (int, error) {
	data, err := f.read(off, int64(len(p)), p, 0, false)
	return len(data), err
}

// ReadAtWithin is ReadAt for a read of a stream that ends at byte end (a
// tensor's last byte + 1): reading ahead, it reads no further than end,
// and it keeps the next read ahead of the stream in flight (prefetch).
func (f *RemoteFile) ReadAtWithin(p []byte, off, end int64) (int, error) {
	data, err := f.read(off, int64(len(p)), p, end, false)
	return len(data), err
}

// ReadShared is ReadAt without the copy: it returns up to n bytes at off
// in a slice that the file's cache may share, so the caller must never
// change it. Fewer than n bytes come with io.EOF at the end of the file,
// else with an error. A header parsed from it keeps its names as views
// into these bytes, with no second buffer.
func (f *RemoteFile) ReadShared(off, n int64) ([]byte, error) { return f.read(off, n, nil, 0, false) }

// read is ReadShared when dst is nil, and else ReadAt into dst, returning
// the part of dst filled. ReadAt copies out of a cached block under the
// lock, so that a block no caller was lent can go back to the client's
// spare buffers when the cache lets it go (see remember). end, when above
// 0, is where the read's stream ends (ReadAtWithin); cont says the read
// continues a stream (the rest of a band split at a block's end).
func (f *RemoteFile) read(off, n int64, dst []byte, end int64, cont bool) ([]byte, error) {
	if off < 0 || n < 0 {
		return nil, fmt.Errorf("%s: negative offset", f.name)
	}
	if n == 0 {
		return nil, nil
	}
	f.mu.Lock()
	size := f.size
	for {
		if b, i, ok := f.fromCache(off, n); ok {
			if dst == nil {
				f.blocks[i].lent = true
			} else {
				b = dst[:copy(dst, b)]
			}
			blk := f.touch(i)
			if blk.ahead && end > 0 {
				f.dropBehind(blk.off, end)
				f.prefetch(blk.off+int64(len(blk.data)), end)
			}
			f.mu.Unlock()
			return b, nil
		}
		// A band of a stream that straddles the end of a cached block
		// (bands rarely divide the read-ahead) takes the block's part and
		// reads on from its end, which continues the stream: not a request
		// of its own for bytes already here. A read is a stream's when the
		// block was read ahead of one, or the caller says where its stream
		// ends (ReadAtWithin: a stream of small bands, a module's scales,
		// starts in a block that was not). Other reads are fetched whole,
		// as they were asked; with the size unknown the rest could be a
		// read at the end of the file.
		if dst != nil && f.size >= 0 {
			if pre, i, ahead := f.cachedPrefix(off); len(pre) > 0 && (ahead || (end > off && f.c.readAhead > 0)) {
				f.touch(i)
				k := copy(dst, pre)
				f.mu.Unlock()
				rest, err := f.read(off+int64(k), n-int64(k), dst[k:], end, true)
				return dst[:k+len(rest)], err
			}
		}
		// A read ahead in flight that holds this one (a ReadAt, its
		// start: the rest follows as above): wait for it, then look in
		// the cache again (another worker's band of the stream).
		p := f.pendingFor(off, n, dst != nil)
		if p == nil {
			break
		}
		f.mu.Unlock()
		<-p.done
		f.mu.Lock()
		if p.err != nil {
			break // read it alone, and report its own error
		}
	}
	if size >= 0 && off >= size {
		f.mu.Unlock()
		return nil, io.EOF
	}
	want := n
	if size >= 0 && off+want > size {
		want = size - off
	}
	fetch := max(want, minRead)
	// A read that starts where an earlier one ended is a stream (a module's
	// bands, read in order by the workers): read ahead, so that the next
	// bands are one request, not one each; the cache bounds what is held.
	// So is a read whose caller says where its stream ends (ReadAtWithin),
	// from its first band: workers that take bands out of order then find
	// them read ahead, not each a read of its own.
	sequential := f.c.readAhead > 0 && (cont || end > off || f.continues(off))
	if sequential && want < f.c.readAhead {
		fetch = f.c.readAhead
	}
	if size >= 0 {
		fetch = min(fetch, size-off)
	}
	if sequential && end > off {
		fetch = min(fetch, max(end-off, want)) // nothing past the stream's end
	}
	if sequential {
		// nor into bytes cached or on their way (a worker that took a
		// later band first read from there on)
		if next := f.nextHeld(off); next-off < fetch {
			fetch = max(next-off, want)
		}
	}
	f.noteEnd(off + fetch)
	var p *pending
	var spare []byte
	if sequential {
		p = &pending{off: off, n: fetch, done: make(chan struct{})}
		f.pending = append(f.pending, p)
		if fetch <= f.c.readAhead {
			spare = f.c.spare()
		}
		if end > 0 {
			f.prefetch(off+fetch, end)
		}
	}
	f.mu.Unlock()
	data, err := f.fetch(off, fetch, spare)
	if err == nil && dst != nil {
		// copied while the bytes are this read's alone: once remembered,
		// the cache may hand them on
		n := copy(dst, data)
		dst = dst[:n]
	}
	f.mu.Lock()
	if p != nil {
		f.pending = slices.DeleteFunc(f.pending, func(q *pending) bool { return q == p })
		p.err = err
	}
	if err == nil {
		f.remember(off, data, dst == nil, sequential, end)
	}
	size = f.size
	f.mu.Unlock()
	if p != nil {
		close(p.done) // its waiters find the bytes in the cache
	}
	if err != nil {
		return nil, err
	}
	got := min(int64(len(data)), n)
	if dst != nil {
		data = dst
	} else {
		data = data[:got:got]
	}
	if got < n {
		if size >= 0 && off+got >= size {
			return data, io.EOF
		}
		return data, fmt.Errorf("%s: short read at %d: %w", f.name, off, io.ErrUnexpectedEOF)
	}
	return data, nil
}

// pending is a read ahead in flight.
type pending struct {
	off, n int64
	done   chan struct{}
	err    error
}

// pendingFor is the read ahead in flight that holds [off, off+n), or with
// start, one that holds byte off; nil when none does.
func (f *RemoteFile) pendingFor(off, n int64, start bool) *pending {
	for _, p := range f.pending {
		if off >= p.off && off < p.off+p.n && (start || off+n <= p.off+p.n) {
			return p
		}
	}
	return nil
}

// continues says whether a read at off starts where a recent one ended
// (weights and scales are read as streams side by side: a few are kept),
// or where a cached block read ahead ends.
func (f *RemoteFile) continues(off int64) bool {
	if off <= 0 {
		return false
	}
	if slices.Contains(f.ends[:], off) {
		return true
	}
	for _, b := range f.blocks {
		if b.ahead && b.off+int64(len(b.data)) == off {
			return true
		}
	}
	return false
}

// prefetchDepth is how many blocks a stream keeps read ahead of the block
// its readers are in: a response's latency is then shared by as many
// blocks (at 50 ms a response and 4 MiB a block, one request at a time
// moves 80 MB/s, whatever the link could). maxPrefetch bounds a file's
// reads in flight that no reader started: the depth for each of two
// streams (a module's weight and its scales).
const (
	prefetchDepth = 3
	maxPrefetch   = 2 * prefetchDepth
)

// prefetch keeps the blocks [at, at + prefetchDepth × read-ahead), clipped
// to end, cached or in flight, starting the reads that are neither, so
// that a stream over the network is not one round trip a block (a 1.9 GB
// embedding at 50 ms a response took 25 s). Called with f.mu held.
func (f *RemoteFile) prefetch(at, end int64) {
	if f.c.readAhead <= 0 || f.prefetchFailed || f.ctx.Err() != nil {
		return
	}
	if f.size >= 0 {
		end = min(end, f.size)
	}
	for range prefetchDepth {
		if at >= end || f.prefetching >= maxPrefetch {
			return
		}
		if p := f.pendingFor(at, 1, true); p != nil {
			at = p.off + p.n
			continue
		}
		if pre, _, _ := f.cachedPrefix(at); len(pre) > 0 {
			at += int64(len(pre))
			continue
		}
		n := min(f.c.readAhead, end-at, f.nextHeld(at)-at)
		p := &pending{off: at, n: n, done: make(chan struct{})}
		f.pending = append(f.pending, p)
		f.prefetching++
		spare := f.c.spare()
		go func(at int64) {
			data, err := f.fetch(at, n, spare)
			f.mu.Lock()
			f.pending = slices.DeleteFunc(f.pending, func(q *pending) bool { return q == p })
			f.prefetching--
			p.err = err
			if err == nil {
				f.remember(at, data, false, true, end)
			} else {
				f.prefetchFailed = true // its readers read alone, and report
			}
			f.mu.Unlock()
			close(p.done)
		}(at)
		at += n
	}
}

// nextHeld is where the first cached block or read in flight that starts
// after off begins (math.MaxInt64 when none does).
func (f *RemoteFile) nextHeld(off int64) int64 {
	next := int64(math.MaxInt64)
	for _, b := range f.blocks {
		if b.off > off {
			next = min(next, b.off)
		}
	}
	for _, p := range f.pending {
		if p.off > off {
			next = min(next, p.off)
		}
	}
	return next
}

// cachedPrefix is the longest run of cached bytes that starts at off, its
// block's index, and whether that block was read ahead of a stream.
func (f *RemoteFile) cachedPrefix(off int64) (run []byte, at int, ahead bool) {
	for i, b := range f.blocks {
		if off >= b.off && off < b.off+int64(len(b.data)) && b.off+int64(len(b.data))-off > int64(len(run)) {
			run, at, ahead = b.data[off-b.off:], i, b.ahead
		}
	}
	return run, at, ahead
}

// touch moves block i to the cache's recent end, so that a block readers
// are in outlives the ones they have left (two streams' prefetches would
// otherwise push it out first), and returns it.
func (f *RemoteFile) touch(i int) block {
	f.blocks[i].used = true
	b := f.blocks[i]
	copy(f.blocks[i:], f.blocks[i+1:])
	f.blocks[len(f.blocks)-1] = b
	return b
}

func (f *RemoteFile) noteEnd(end int64) {
	copy(f.ends[1:], f.ends[:len(f.ends)-1])
	f.ends[0] = end
}

// fromCache returns the n cached bytes at off and the block holding them,
// when one block holds them.
func (f *RemoteFile) fromCache(off, n int64) ([]byte, int, bool) {
	for i := len(f.blocks) - 1; i >= 0; i-- {
		b := f.blocks[i]
		if off >= b.off && off+n <= b.off+int64(len(b.data)) {
			s := off - b.off
			return b.data[s : s+n : s+n], i, true
		}
	}
	return nil, 0, false
}

// remember caches data read at off; lent says a caller holds a view of it
// (ReadShared). A block that leaves the cache unlent, of the read-ahead's
// size, is the client's again for the next read ahead: a module streamed
// over the network then reads into the same few buffers instead of leaving
// one fresh 4 MiB buffer of garbage a request.
func (f *RemoteFile) remember(off int64, data []byte, lent, ahead bool, stream int64) {
	if int64(len(data)) > cacheLimit {
		return // a read larger than the cache (a whole tensor) is its caller's alone: kept, it would double the memory
	}
	f.blocks = append(f.blocks, block{off: off, data: data, lent: lent, ahead: ahead, stream: stream})
	f.cached += int64(len(data))
	for f.cached > cacheLimit && len(f.blocks) > 1 {
		old := f.blocks[0]
		f.cached -= int64(len(old.data))
		f.blocks[0] = block{}
		f.blocks = f.blocks[1:]
		if !old.lent {
			f.c.putSpare(old.data)
		}
	}
}

// dropBehind lets go of the blocks a stream read ahead, and a read has
// used, that end two whole read-aheads or more before at, where its
// readers now are (a block no read has used may be another reader's of the
// same tensor, a job of serve's behind this one): two blocks
// behind stay (a worker descheduled while the others read on), and the
// cache holds a stream's six blocks rather than filling to cacheLimit
// (which two streams need).
func (f *RemoteFile) dropBehind(at, stream int64) {
	kept := f.blocks[:0]
	for _, b := range f.blocks {
		if b.ahead && b.used && b.stream == stream && b.off+int64(len(b.data)) <= at-2*f.c.readAhead {
			f.cached -= int64(len(b.data))
			if !b.lent {
				f.c.putSpare(b.data)
			}
			continue
		}
		kept = append(kept, b)
	}
	clear(f.blocks[len(kept):])
	f.blocks = kept
}

// resolve looks up where the hub redirects the file, without reading it,
// so that the first read can go straight to the CDN. It runs at most once;
// reads wait for it.
func (f *RemoteFile) resolve() {
	f.mu.Lock()
	if f.resolving != nil || f.resolved != "" {
		f.mu.Unlock()
		return
	}
	done := make(chan struct{})
	f.resolving = done
	f.mu.Unlock()
	defer close(done)
	var final string
	var m meta
	err := f.c.do(f.ctx, func(ctx context.Context) error {
		var err error
		final, m, err = f.c.redirectTarget(ctx, f.url)
		return err
	})
	if err != nil {
		return // the read will try again through the hub URL and report
	}
	if f.pin.check(f.name, m.commit) != nil {
		return // not resolved: the read goes through the hub URL and reports the move
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resolved = final
	if m.linked != "" {
		f.linked = m.linked
	}
	if m.size >= 0 && f.size < 0 {
		f.size, f.sizeFrom = m.size, "the hub's X-Linked-Size"
	}
}

func (f *RemoteFile) waitResolve() {
	f.mu.Lock()
	ch := f.resolving
	f.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-f.ctx.Done():
		}
	}
}

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
