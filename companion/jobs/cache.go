package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quantscope/quantscope/companion/proto"
	"github.com/quantscope/quantscope/formats/checkpoint"
)

// cache keeps loaded checkpoints by (source, revision, endpoint, hub token)
// for ttl after their last job ends, so that jobs on the same repo read its
// headers once; a job that arrives while another is reading them waits for
// that read instead of starting its own.
type cache struct {
	ttl  time.Duration
	load Loader

	mu      sync.Mutex
	entries map[cacheKey]*entry
	stop    chan struct{}
	once    sync.Once
	base    context.Context // the loads' contexts: a loaded checkpoint outlives the job that loaded it
	cancel  context.CancelFunc
}

type cacheKey struct{ source, revision, endpoint, token string }

// sourceKey is the spelling of a source the cache keeps it under. Only a
// path that says it is one (./…) is normalised: ./ORG/NAME, ./ORG/NAME/
// and .//ORG/./NAME read the same folder, so "." and empty elements are
// dropped and the "./" kept. ORG/NAME (a hub repo, or a folder of that
// name) and ORG/NAME/ (a path) are not the same source and keep their
// spellings; ".." is kept (through a symbolic link, a/../b need not be b).
func sourceKey(source string) string {
	if !strings.HasPrefix(source, "./") {
		return source
	}
	parts := strings.FieldsFunc(source, func(r rune) bool { return r == '/' })
	parts = slices.DeleteFunc(parts, func(p string) bool { return p == "." })
	return "./" + strings.Join(parts, "/")
}

type entry struct {
	ready chan struct{} // closed when the load ends
	ck    *checkpoint.Checkpoint
	err   error
	end   context.CancelFunc // ends ck's reads (a remote file's reads are bound to its load's context)
	refs  int                // jobs using ck
	idle  time.Time          // when refs last dropped to 0
}

func newCache(ttl time.Duration, load Loader) *cache {
	c := &cache{ttl: ttl, load: load, entries: map[cacheKey]*entry{}, stop: make(chan struct{})}
	c.base, c.cancel = context.WithCancel(context.Background())
	go c.janitor()
	return c
}

// get returns the checkpoint s names, loading it when no fresh one is kept;
// shared says it was loaded by an earlier job. release must be called when
// the job is done with it. waiting is called when the job waits for another
// job's load.
func (c *cache) get(ctx context.Context, s proto.Submit, progress func(checkpoint.Progress), waiting func()) (ck *checkpoint.Checkpoint, shared bool, release func(), err error) {
	key := cacheKey{sourceKey(s.Source), s.Revision, s.Endpoint, s.HubToken}
	for {
		if err := ctx.Err(); err != nil {
			return nil, false, nil, err
		}
		c.mu.Lock()
		e := c.entries[key]
		if e == nil {
			e = &entry{ready: make(chan struct{}), refs: 1}
			c.entries[key] = e
			c.mu.Unlock()
			ck, err := c.loadFor(ctx, s, progress, e)
			c.mu.Lock()
			e.ck, e.err = ck, err
			if err != nil {
				delete(c.entries, key)
			}
			close(e.ready)
			c.mu.Unlock()
			if err != nil {
				return nil, false, nil, err
			}
			return ck, false, c.releaser(e), nil
		}
		select {
		case <-e.ready: // loaded (failed loads are not kept)
			e.refs++
			c.mu.Unlock()
			return e.ck, true, c.releaser(e), nil
		default:
		}
		c.mu.Unlock()
		waiting()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, false, nil, ctx.Err()
		}
		if e.err != nil && !errors.Is(e.err, context.Canceled) {
			return nil, false, nil, e.err // the same source fails the same way
		}
		// loaded, or the loading job was cancelled: look again
	}
}

// loadFor loads under a context of the cache's own that the job's
// cancellation ends only while the load runs: once loaded, the checkpoint
// (and its remote readers) serves later jobs too.
func (c *cache) loadFor(ctx context.Context, s proto.Submit, progress func(checkpoint.Progress), e *entry) (*checkpoint.Checkpoint, error) {
	lctx, end := context.WithCancel(c.base)
	stop := context.AfterFunc(ctx, end)
	defer func() {
		if p := recover(); p != nil { // no job may wait forever on a load that panicked
			end()
			c.mu.Lock()
			if key := (cacheKey{sourceKey(s.Source), s.Revision, s.Endpoint, s.HubToken}); c.entries[key] == e {
				delete(c.entries, key)
			}
			e.err = fmt.Errorf("loading %s: internal error: %v", s.Source, p)
			close(e.ready)
			c.mu.Unlock()
			panic(p)
		}
	}()
	ck, err := c.load(lctx, s, progress)
	if !stop() { // the job was cancelled while loading
		if err == nil {
			ck.Close()
		}
		err = ctx.Err()
	}
	if err != nil {
		end()
		return nil, err
	}
	e.end = end
	return ck, nil
}

func (c *cache) releaser(e *entry) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			if e.refs--; e.refs == 0 {
				e.idle = time.Now()
			}
			c.mu.Unlock()
		})
	}
}

// janitor closes checkpoints unused for ttl.
func (c *cache) janitor() {
	t := time.NewTicker(c.ttl / 4)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			c.mu.Lock()
			for k, e := range c.entries {
				if e.ck != nil && e.refs == 0 && now.Sub(e.idle) >= c.ttl {
					e.ck.Close()
					e.end()
					delete(c.entries, k)
				}
			}
			c.mu.Unlock()
		}
	}
}

// close closes every unused checkpoint, ends the reads of those in use,
// and stops the janitor.
func (c *cache) close() {
	c.once.Do(func() { close(c.stop); c.cancel() })
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		if e.ck != nil && e.refs == 0 {
			e.ck.Close()
			e.end()
			delete(c.entries, k)
		}
	}
}
