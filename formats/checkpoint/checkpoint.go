// Package checkpoint reads a whole repo (its shards' headers, the shard index,
// config.json and hf_quant_config.json) into an inventory: every tensor, every
// module with its format and logical parameter count, the declared scheme,
// statistics by dtype and format, and findings wherever the metadata and the
// bytes disagree. It reads headers and the few small tensors that describe
// shapes, never the weights, unless asked to decode a module.
package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
)

// Options tune Load.
type Options struct {
	// ReadShapeTensors reads the values of compressed-tensors weight_shape
	// tensors (16 bytes each) so logical widths are exact; without it they are
	// inferred from packed widths and reported as such.
	ReadShapeTensors bool
	// Parallel bounds concurrent shard reads (default 20).
	Parallel int
	// Progress, when set, is called after each shard's header is read (from
	// several goroutines, one call at a time). It must not block.
	Progress func(Progress)
	// KeepGoing turns a shard that cannot be read into a "shard-unreadable"
	// finding instead of an error, so that what was read is kept (the page
	// uses it; the command line wants all or nothing).
	KeepGoing bool
}

// Progress is how far a Load has come.
type Progress struct {
	ShardsDone int   `json:"shards_done"`
	Shards     int   `json:"shards"`
	Bytes      int64 `json:"bytes"` // received so far, for remote sources
}

// Shard is one safetensors file of the checkpoint.
type Shard struct {
	Path   string
	Size   int64
	Header *safetensors.Header
	r      io.ReaderAt
}

// Index is model.safetensors.index.json.
type Index struct {
	TotalSize *uint64           `json:"-"`
	WeightMap map[string]string `json:"weight_map"`
}

// Checkpoint is a loaded repo.
type Checkpoint struct {
	Source   hub.Source
	Files    []hub.File
	Shards   []*Shard
	Index    *Index
	Config   []byte // config.json, nil when absent
	HFQuant  []byte // hf_quant_config.json, nil when absent
	Scheme   *scheme.Scheme
	Modules  []*scheme.Module
	Findings []scheme.Finding

	tensors  []scheme.TensorInfo
	locs     []tensorLoc // locs[i] is where tensors[i] is stored
	location map[string]tensorLoc
	byModule map[string]*scheme.Module
}

type tensorLoc struct {
	shard *Shard
	t     *safetensors.Tensor
}

const (
	indexFile       = "model.safetensors.index.json"
	maxJSONFile     = 64 << 20
	defaultParallel = 20
)

// Load reads a checkpoint from a source.
func Load(ctx context.Context, src hub.Source, opt Options) (*Checkpoint, error) {
	files, err := src.List(ctx)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Source: src, Files: files, location: map[string]tensorLoc{}}
	sizes := map[string]int64{}
	for _, f := range files {
		sizes[f.Path] = f.Size
	}
	readJSON := func(name string) ([]byte, error) {
		if _, ok := sizes[name]; !ok {
			return nil, nil
		}
		b, err := src.ReadFile(ctx, name, maxJSONFile)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return b, err
	}
	if p, ok := src.(hub.Preparer); ok {
		p.Prepare(ctx, likelyShards(files, sizes))
	}
	// The three JSON files are independent: fetch them together.
	var idx []byte
	var wg sync.WaitGroup
	var errs [3]error
	for i, f := range []struct {
		name string
		dst  *[]byte
	}{{"config.json", &c.Config}, {"hf_quant_config.json", &c.HFQuant}, {indexFile, &idx}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			*f.dst, errs[i] = readJSON(f.name)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	var shardPaths []string
	perShard := map[string]shardHint{}
	if idx != nil {
		if c.Index, err = parseIndex(idx); err != nil {
			return nil, err
		}
		for name, p := range c.Index.WeightMap { // the index sits at the root: its paths are repo paths
			h, seen := perShard[p]
			if !seen {
				shardPaths = append(shardPaths, p)
			}
			h.tensors++
			h.nameBytes += len(name)
			perShard[p] = h
		}
		slices.Sort(shardPaths)
		for _, p := range shardPaths {
			if _, ok := sizes[p]; !ok {
				return nil, fmt.Errorf("%s: %s: rule index-missing-shard: weight_map names shard %q, which the repo does not have", src.Name(), indexFile, p)
			}
		}
	} else {
		for _, f := range files {
			if strings.HasSuffix(f.Path, ".safetensors") {
				shardPaths = append(shardPaths, f.Path)
			}
		}
	}
	if len(shardPaths) == 0 {
		return nil, fmt.Errorf("%s: rule no-safetensors: the repo holds no .safetensors files", src.Name())
	}
	if c.Scheme, err = scheme.Detect(c.Config, c.HFQuant); err != nil {
		return nil, fmt.Errorf("%s: %w", src.Name(), err)
	}
	if err := c.readHeaders(ctx, shardPaths, perShard, opt); err != nil { // with KeepGoing: no shard could be read
		c.Close()
		return nil, err
	}
	n := 0
	for _, s := range c.Shards {
		n += len(s.Header.Tensors)
	}
	c.location = make(map[string]tensorLoc, n)
	c.tensors = make([]scheme.TensorInfo, 0, n)
	c.locs = make([]tensorLoc, 0, n)
	for _, s := range c.Shards {
		for i := range s.Header.Tensors {
			t := &s.Header.Tensors[i]
			if prev, dup := c.location[t.Name]; dup {
				c.Findings = append(c.Findings, scheme.Finding{Rule: "duplicate-tensor", Severity: scheme.SeverityError, Tensor: t.Name,
					Message: fmt.Sprintf("tensor is stored in both %s and %s; readers keep one of them", prev.shard.Path, s.Path)})
				continue
			}
			c.location[t.Name] = tensorLoc{shard: s, t: t}
			c.locs = append(c.locs, tensorLoc{shard: s, t: t})
			c.tensors = append(c.tensors, scheme.TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape, NBytes: t.NBytes()})
		}
	}
	var shapes scheme.ShapeValues
	if opt.ReadShapeTensors {
		shapes = c.shapeValues
	}
	c.Modules = scheme.Group(c.tensors, c.Scheme, shapes)
	c.byModule = make(map[string]*scheme.Module, len(c.Modules))
	for _, m := range c.Modules {
		c.byModule[m.Name] = m
	}
	c.Findings = append(c.Findings, scheme.CheckModules(c.Modules, c.Scheme)...)
	c.Findings = append(c.Findings, c.checkRepo()...)
	sortFindings(c.Findings)
	return c, nil
}

// likelyShards guesses, before the index is read, which files it will name:
// with an index, the files of the hub's sharded naming (…-00001-of-00009…);
// without one, every .safetensors file.
func likelyShards(files []hub.File, sizes map[string]int64) []string {
	_, indexed := sizes[indexFile]
	var out []string
	for _, f := range files {
		if !strings.HasSuffix(f.Path, ".safetensors") {
			continue
		}
		if !indexed || (strings.Contains(f.Path, "-of-") && !strings.Contains(f.Path, "/")) {
			out = append(out, f.Path)
		}
	}
	return out
}

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
	for i, p := range paths {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c.Shards[i], errs[i] = readShard(ctx, c.Source, p, headerGuess(perShard[p]))
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
	return errors.Join(errs...)
}

// readShard reads a header in one read of a guessed prefix, and a second,
// exact one only when the guess was short.
func readShard(ctx context.Context, src hub.Source, p string, guess int64) (*Shard, error) {
	r, size, err := src.Open(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	s := &Shard{Path: p, Size: size, r: r}
	n := min(guess, size)
	if size < 0 {
		n = guess
	}
	buf := make([]byte, n)
	got, err := r.ReadAt(buf, 0)
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
		more := make([]byte, need)
		copy(more, buf)
		if _, err := r.ReadAt(more[len(buf):], int64(len(buf))); err != nil {
			closeReader(r)
			return nil, &safetensors.FormatError{File: p, Offset: int64(len(buf)), Rule: safetensors.RuleHeaderBounds,
				Msg: fmt.Sprintf("cannot read the %d-byte header: %v", need-8, err), Err: err}
		}
		buf = more
	}
	if s.Header, err = safetensors.ParsePrefix(p, buf, size); err != nil {
		closeReader(r)
		return nil, err
	}
	return s, nil
}

func closeReader(r io.ReaderAt) {
	if c, ok := r.(io.Closer); ok {
		c.Close()
	}
}

// Close releases the shards' readers.
func (c *Checkpoint) Close() error {
	for _, s := range c.Shards {
		if s != nil {
			closeReader(s.r)
		}
	}
	return nil
}

// ReadTensor implements scheme.TensorReader over the shards.
func (c *Checkpoint) ReadTensor(name string, off, n int64) ([]byte, error) {
	loc, ok := c.location[name]
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", c.Source.Name(), name)
	}
	if off < 0 || n < 0 || uint64(off)+uint64(n) > loc.t.NBytes() {
		return nil, fmt.Errorf("%s: tensor %q: read [%d, %d) outside its %d bytes", loc.shard.Path, name, off, off+n, loc.t.NBytes())
	}
	b := make([]byte, n)
	at := loc.shard.Header.DataStart() + int64(loc.t.Begin) + off
	if _, err := loc.shard.r.ReadAt(b, at); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
		return nil, fmt.Errorf("%s: tensor %q: reading %d bytes at %d: %w", loc.shard.Path, name, n, at, err)
	}
	return b, nil
}

// shapeValues reads a small integer tensor (weight_shape) for scheme.Group.
func (c *Checkpoint) shapeValues(name string) ([]int64, bool) {
	loc, ok := c.location[name]
	if !ok || loc.t.NBytes() > 64 {
		return nil, false
	}
	b, err := c.ReadTensor(name, 0, int64(loc.t.NBytes()))
	if err != nil {
		return nil, false
	}
	var out []int64
	switch loc.t.DType {
	case safetensors.I64:
		for i := 0; i+8 <= len(b); i += 8 {
			out = append(out, int64(uint64(b[i])|uint64(b[i+1])<<8|uint64(b[i+2])<<16|uint64(b[i+3])<<24|
				uint64(b[i+4])<<32|uint64(b[i+5])<<40|uint64(b[i+6])<<48|uint64(b[i+7])<<56))
		}
	case safetensors.I32:
		for i := 0; i+4 <= len(b); i += 4 {
			out = append(out, int64(int32(uint32(b[i])|uint32(b[i+1])<<8|uint32(b[i+2])<<16|uint32(b[i+3])<<24)))
		}
	default:
		return nil, false
	}
	return out, true
}

// Module finds a module by name, or the module that holds a tensor of that name.
func (c *Checkpoint) Module(name string) (*scheme.Module, bool) {
	if m, ok := c.byModule[name]; ok {
		return m, true
	}
	if _, ok := c.location[name]; ok {
		mod, _ := scheme.SplitName(name)
		if m, ok := c.byModule[mod]; ok {
			return m, true
		}
		if m, ok := c.byModule[name]; ok {
			return m, true
		}
	}
	return nil, false
}

// TensorNames lists every tensor, in shard then data order.
func (c *Checkpoint) TensorNames() []string {
	out := make([]string, len(c.tensors))
	for i, t := range c.tensors {
		out[i] = t.Name
	}
	return out
}
