package checkpoint

// Reading the shards' headers: each shard's one or two range reads, its
// header parsed, its tensors grouped and checked on their own as soon as it
// is in, several shards at once; a shard's error said with its source.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
)

// shardHint is what the index says a shard holds.
type shardHint struct{ tensors, nameBytes int }

// headerGuess sizes the first read of a shard. From the index's names it is
// nearly exact: an entry is its quoted name and about 80 bytes of dtype,
// shape and offsets (a short guess costs one exact second read; a long one
// costs bytes). Without an index it is the hub clients' 100 KB.
func headerGuess(h shardHint) int64 {
	if h.tensors > 0 {
		return int64(h.nameBytes) + 88*int64(h.tensors) + 256
	}
	return 100_000
}

func (c *Checkpoint) readHeaders(ctx context.Context, paths []string, perShard map[string]shardHint, opt Options) error {
	par := opt.Parallel
	if par <= 0 {
		par = defaultParallel
	}
	c.Shards = make([]*Shard, len(paths))
	errs := make([]error, len(paths))
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	report := func() {
		if opt.Progress == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		done++
		p := Progress{ShardsDone: done, Shards: len(paths)}
		if st, ok := c.Source.(hub.StatsSource); ok {
			p.Bytes = st.Stats().Bytes
		}
		opt.Progress(p)
	}
	// With an index, each shard's tensor infos go to their place in one
	// slice of all of them, which becomes c.tensors without a copy when
	// every header holds what the index says (assemble checks).
	var all []scheme.TensorInfo
	slot := make([][]scheme.TensorInfo, len(paths))
	if n := 0; len(perShard) > 0 {
		for _, p := range paths {
			n += perShard[p].tensors
		}
		all = make([]scheme.TensorInfo, n)
		n = 0
		for i, p := range paths {
			k := perShard[p].tensors
			slot[i] = all[n : n+k : n+k]
			n += k
		}
	}
	c.allInfos = all
	var bufs headerBuffers
	for i, p := range paths {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sh, err := readShard(ctx, c.Source, p, headerGuess(perShard[p]), &bufs)
			if err == nil {
				c.digest(sh, slot[i], opt)
			}
			c.Shards[i], errs[i] = sh, err
			report()
		}()
	}
	wg.Wait()
	if opt.KeepGoing {
		kept := c.Shards[:0]
		for i, sh := range c.Shards {
			if errs[i] != nil {
				c.Findings = append(c.Findings, scheme.Finding{Rule: RuleShardUnreadable, Severity: scheme.SeverityError,
					Message: fmt.Sprintf("%s: %v; the inventory covers the other shards", paths[i], errs[i])})
				continue
			}
			kept = append(kept, sh)
		}
		c.Shards = kept
		if len(kept) > 0 && ctx.Err() == nil {
			return nil
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: reading the shards' headers: %w", c.Source.Name(), context.Cause(ctx))
	}
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, inSource(c.Source, paths[i], err))
		}
	}
	// 80 shards failing alike (a hub that answers 404 for all, a lost
	// network) would be 80 clauses of one error: the first few say it.
	if len(failed) > shownShardErrors {
		more := fmt.Errorf("and %d more of the %d shards could not be read", len(failed)-shownShardErrors, len(paths))
		return &shardErrors{text: errors.Join(append(failed[:shownShardErrors:shownShardErrors], more)...).Error(), all: failed}
	}
	return errors.Join(failed...)
}

// shownShardErrors is how many shards' errors a failed load names.
const shownShardErrors = 2

// shardErrors is a load's failed shards: its text names the first few,
// while errors.Is and errors.As still see every one (a 403 from the fifth
// shard still makes the load's error an authentication one).
type shardErrors struct {
	text string
	all  []error
}

func (e *shardErrors) Error() string   { return e.text }
func (e *shardErrors) Unwrap() []error { return e.all }

// sourceError is a shard's error said with the source it is in, so that
// a command reading two repos (diff) or a folder tells which one failed.
type sourceError struct {
	msg string
	err error
}

func (e *sourceError) Error() string { return e.msg }
func (e *sourceError) Unwrap() error { return e.err }

// inSource names the source in shard p's error, which starts with p: a
// repo's name goes in front ("ORG/NAME@main: model-00001….safetensors: …"),
// and a one-file source's name (the path or URL the user gave, which ends
// with p) stands for p.
func inSource(src hub.Source, p string, err error) error {
	name, msg := src.Name(), err.Error()
	if strings.HasPrefix(msg, p+":") && (name == p || strings.HasSuffix(name, "/"+p) || strings.HasSuffix(name, ":"+p)) {
		rest := strings.TrimPrefix(msg[len(p):], ": ")
		if strings.HasPrefix(rest, "GET "+name+":") {
			return &sourceError{rest, err} // a plain URL: the request names it already
		}
		return &sourceError{name + ": " + rest, err}
	}
	return &sourceError{name + ": " + msg, err}
}

// digest groups and checks one shard's tensors on their own, their infos
// in slot when it has their number.
func (c *Checkpoint) digest(sh *Shard, slot []scheme.TensorInfo, opt Options) {
	if len(slot) == len(sh.Header.Tensors) {
		sh.infos = slot
	} else {
		sh.infos = make([]scheme.TensorInfo, len(sh.Header.Tensors))
	}
	for i := range sh.Header.Tensors {
		t := &sh.Header.Tensors[i]
		sh.infos[i] = scheme.TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape, NBytes: t.NBytes()}
	}
	var shapes scheme.ShapeValues
	if opt.ReadShapeTensors {
		shapes = sh.shapeValues
	}
	sh.modules = scheme.Group(sh.infos, c.Scheme, shapes)
	sh.findings = scheme.CheckModules(sh.modules, c.Scheme)
	if c.Index != nil {
		sh.listed = make([]indexState, len(sh.infos))
		for i := range sh.infos {
			file, ok := c.Index.Shard(sh.infos[i].Name)
			switch {
			case !ok:
				sh.listed[i] = unlisted
			case file != sh.Path:
				sh.listed[i] = listedWrong
			}
		}
	}
}

// onceReader reads bytes straight into the caller's buffer, keeping no
// copy (hub.RemoteFile's ReadOnce): a header is read once and parsed.
type onceReader interface {
	ReadOnce(dst []byte, off int64) (int, error)
}

// headerBuffers lends the buffers headers are read into. A header's names
// are copied out when it is parsed (a third of its bytes), so its buffer
// goes on to the next shard's header: an 80-shard repo's 25 MB of headers
// cost the buffers of the reads in flight at once, not 25 MB held.
type headerBuffers struct {
	mu   sync.Mutex
	free [][]byte
}

// get returns a buffer of length n.
func (p *headerBuffers) get(n int64) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, b := range p.free {
		if int64(cap(b)) >= n {
			p.free[i] = p.free[len(p.free)-1]
			p.free = p.free[:len(p.free)-1]
			return b[:n]
		}
	}
	return make([]byte, n, n+n/8) // room for a slightly larger header next
}

// put takes back a buffer nothing refers to any more.
func (p *headerBuffers) put(b []byte) {
	p.mu.Lock()
	p.free = append(p.free, b)
	p.mu.Unlock()
}

// readAt reads len(buf) bytes at off, from the server without a cached copy
// when r can.
func readAt(r io.ReaderAt, buf []byte, off int64) (int, error) {
	if or, ok := r.(onceReader); ok {
		return or.ReadOnce(buf, off)
	}
	return r.ReadAt(buf, off)
}

// readShard reads a header in one read of a guessed prefix, and a second,
// exact one only when the guess was short. Its buffers come from bufs and
// go back there once the header is parsed (after an error they are simply
// dropped).
func readShard(ctx context.Context, src hub.Source, p string, guess int64, bufs *headerBuffers) (*Shard, error) {
	r, size, err := src.Open(ctx, p)
	if err != nil {
		if strings.HasPrefix(err.Error(), p+": ") {
			return nil, err // a remote file's errors name it already
		}
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	s := &Shard{Path: p, Size: size, r: r}
	n := min(guess, size)
	if size < 0 {
		n = guess
	}
	buf := bufs.get(n)
	got, err := readAt(r, buf, 0)
	if err != nil && !(errors.Is(err, io.EOF) && int64(got) == size) {
		if int64(got) < min(8, n) || !errors.Is(err, io.EOF) {
			closeReader(r)
			return nil, fmt.Errorf("%s: reading header: %w", p, err)
		}
	}
	buf = buf[:got]
	need, err := safetensors.PrefixNeed(p, buf, size)
	if err != nil {
		closeReader(r)
		return nil, err
	}
	if need > int64(len(buf)) {
		more := bufs.get(need)
		copy(more, buf)
		bufs.put(buf)
		buf = more
		if _, err := readAt(r, more[got:], int64(got)); err != nil {
			closeReader(r)
			return nil, &safetensors.FormatError{File: p, Offset: int64(got), Rule: safetensors.RuleHeaderBounds,
				Msg: fmt.Sprintf("cannot read the %d-byte header: %v", need-8, err), Err: err}
		}
	}
	if s.Header, err = safetensors.ParseReusedPrefix(p, buf, size); err != nil {
		closeReader(r)
		return nil, err
	}
	bufs.put(buf)
	return s, nil
}
