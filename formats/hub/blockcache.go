package hub

import (
	"math"
	"slices"
)

// The block cache and the stream bookkeeping of a RemoteFile: reads ahead in
// flight, the blocks kept (recent ones, a stream's behind and ahead of its
// readers), prefetch, and the reuse of blocks let go. Every function here
// is called with f.mu held, except the prefetch goroutine's, which takes it.

// block is a cached run of a file's bytes.
type block struct {
	off   int64
	data  []byte
	ahead bool // read ahead of a stream: its reads keep the next in flight
	used  bool // a read took bytes from it (dropBehind lets only such go)
	// stream is the end of the stream it was read ahead for (ReadAtWithin's
	// end; 0 when none said): the stream's reads let its blocks behind go.
	stream int64
}

const (
	minRead    = 16 << 10 // small reads are widened to this, for neighbours
	cacheLimit = 40 << 20 // per file: two streams (a module's codes and scales), each its block, two behind and prefetchDepth ahead
)

// pending is a read ahead in flight.
type pending struct {
	off, n int64
	done   chan struct{}
	err    error
}

// pendingFor is the read ahead in flight that holds byte off (a read
// starting there waits for it and takes what it holds); nil when none does.
func (f *RemoteFile) pendingFor(off int64) *pending {
	for _, p := range f.pending {
		if off >= p.off && off < p.off+p.n {
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
		if p := f.pendingFor(at); p != nil {
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
				f.remember(at, data, true, end)
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

// remember caches data read at off. Readers copy out of the cache, so a
// block that leaves it, of the read-ahead's size, is the client's again for the next read ahead: a module streamed
// over the network then reads into the same few buffers instead of leaving
// one fresh 4 MiB buffer of garbage a request.
func (f *RemoteFile) remember(off int64, data []byte, ahead bool, stream int64) {
	if int64(len(data)) > cacheLimit {
		return // a read larger than the cache (a whole tensor) is its caller's alone: kept, it would double the memory
	}
	f.blocks = append(f.blocks, block{off: off, data: data, ahead: ahead, stream: stream})
	f.cached += int64(len(data))
	for f.cached > cacheLimit && len(f.blocks) > 1 {
		old := f.blocks[0]
		f.cached -= int64(len(old.data))
		f.blocks[0] = block{}
		f.blocks = f.blocks[1:]
		f.c.putSpare(old.data)
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
			f.c.putSpare(b.data)
			continue
		}
		kept = append(kept, b)
	}
	clear(f.blocks[len(kept):])
	f.blocks = kept
}
