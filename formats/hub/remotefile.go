package hub

import (
	"context"
	"fmt"
	"io"
	"slices"
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
			name, p.rev, ShortCommit(p.commit), ShortCommit(commit), ErrChanged, p.commit)
	}
	return nil
}

// ShortCommit is a commit hash as people quote it: its first 12 digits.
func ShortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

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
	data, err := f.read(off, p, 0, false)
	return len(data), err
}

// ReadAtWithin is ReadAt for a read of a stream that ends at byte end (a
// tensor's last byte + 1): reading ahead, it reads no further than end,
// and it keeps the next read ahead of the stream in flight (prefetch).
func (f *RemoteFile) ReadAtWithin(p []byte, off, end int64) (int, error) {
	data, err := f.read(off, p, end, false)
	return len(data), err
}

// ReadOnce reads len(dst) bytes at off into dst straight from the server
// and keeps nothing in the file's cache: for bytes read once and parsed (a
// shard's header), whose buffer the caller then reuses for the next file.
// Bytes the cache holds already are copied from there.
// Fewer bytes come with io.EOF at the end of the file, else with an error.
func (f *RemoteFile) ReadOnce(dst []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%s: negative offset", f.name)
	}
	if len(dst) == 0 {
		return 0, nil
	}
	f.mu.Lock()
	size := f.size
	want := int64(len(dst))
	if size >= 0 && off+want > size {
		want = size - off
	}
	if want <= 0 {
		f.mu.Unlock()
		return 0, io.EOF
	}
	if b, i, ok := f.fromCache(off, want); ok {
		// already here (a file of unknown size is read first for its size:
		// primeSize): copied, so the caller's buffer holds no view
		n := copy(dst, b)
		f.touch(i)
		f.mu.Unlock()
		return n, f.readEnd(off, int64(n), int64(len(dst)), size)
	}
	f.noteEnd(off + want)
	f.mu.Unlock()
	data, err := f.fetch(off, want, dst[:0:want])
	if err != nil {
		return 0, err
	}
	n := len(data)
	if n > 0 && &data[0] != &dst[0] { // not read in place (it always is: dst has the room)
		n = copy(dst, data)
	}
	f.mu.Lock()
	size = f.size
	f.mu.Unlock()
	return n, f.readEnd(off, int64(n), int64(len(dst)), size)
}

// readEnd is the error of a read of n bytes at off that got got of them:
// none when it got them all, io.EOF when it stopped at the file's end (of
// size bytes, when known), else a short read.
func (f *RemoteFile) readEnd(off, got, n, size int64) error {
	switch {
	case got >= n:
		return nil
	case size >= 0 && off+got >= size:
		return io.EOF
	}
	return fmt.Errorf("%s: short read at %d: %w", f.name, off, io.ErrUnexpectedEOF)
}

// read is ReadAt into dst, returning the part of dst filled (all of it,
// but at the end of the file). It copies
// out of a cached block under the lock, so that a block can go back to the
// client's spare buffers when the cache lets it go (see remember). end, when above
// 0, is where the read's stream ends (ReadAtWithin); cont says the read
// continues a stream (the rest of a band split at a block's end).
func (f *RemoteFile) read(off int64, dst []byte, end int64, cont bool) ([]byte, error) {
	n := int64(len(dst))
	if off < 0 {
		return nil, fmt.Errorf("%s: negative offset", f.name)
	}
	if n == 0 {
		return nil, nil
	}
	f.mu.Lock()
	size := f.size
	for {
		if b, i, ok := f.fromCache(off, n); ok {
			b = dst[:copy(dst, b)]
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
		if f.size >= 0 {
			if pre, i, ahead := f.cachedPrefix(off); len(pre) > 0 && (ahead || (end > off && f.c.readAhead > 0)) {
				f.touch(i)
				k := copy(dst, pre)
				f.mu.Unlock()
				rest, err := f.read(off+int64(k), dst[k:], end, true)
				return dst[:k+len(rest)], err
			}
		}
		// A read ahead in flight that holds this one (a ReadAt, its
		// start: the rest follows as above): wait for it, then look in
		// the cache again (another worker's band of the stream).
		p := f.pendingFor(off)
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
	if err == nil {
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
		f.remember(off, data, sequential, end)
	}
	size = f.size
	f.mu.Unlock()
	if p != nil {
		close(p.done) // its waiters find the bytes in the cache
	}
	if err != nil {
		return nil, err
	}
	return dst, f.readEnd(off, min(int64(len(data)), n), n, size)
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
