// Package checkpoint reads a whole repo (its shards' headers, the shard index,
// config.json and hf_quant_config.json) into an inventory: every tensor, every
// module with its format and logical parameter count, the declared scheme,
// statistics by dtype and format, and findings wherever the metadata and the
// bytes disagree. It reads headers and the few small tensors that describe
// shapes, never the weights, unless asked to decode a module.
package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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
	// Trace, when set, is told when each phase of Load ends, for timing.
	Trace func(phase string)
	// Modules, when set, are the only modules (or tensors) the caller
	// will use: with an index, only the shards it names for their tensors
	// are read (one or two of a large repo's dozens, not every header),
	// and the checkpoint is Partial. When the index names none of them,
	// every shard is read, as without Modules, so that a name that is in
	// no header gets the nearest ones.
	Modules []string
}

func (o *Options) trace(phase string) {
	if o.Trace != nil {
		o.Trace(phase)
	}
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

	// Worked out as soon as the header arrives, while other shards are
	// still on the way: its tensors, grouped and checked on their own.
	infos    []scheme.TensorInfo
	listed   []indexState // with an index: what it says of each tensor
	modules  []*scheme.Module
	findings []scheme.Finding
}

// Checkpoint is a loaded repo.
type Checkpoint struct {
	// siblingNote says why the config files beside a one-file source were
	// set aside ("" when they were read or absent).
	siblingNote string
	// setAside are .safetensors files in subfolders of a repo without an
	// index, which loaders do not read and neither does the inventory.
	setAside []string

	Source   hub.Source
	Files    []hub.File
	Shards   []*Shard
	Index    *Index
	Config   []byte // config.json, nil when absent
	HFQuant  []byte // hf_quant_config.json, nil when absent
	Scheme   *scheme.Scheme
	Modules  []*scheme.Module
	Findings []scheme.Finding

	tensors     []scheme.TensorInfo // may share its array with the shards' infos
	allInfos    []scheme.TensorInfo // while loading: every shard's infos, in shard order
	locs        []tensorLoc         // locs[i] is where tensors[i] is stored
	listed      []indexState        // with an index: what it says of tensors[i]
	shardByPath map[string]*Shard
	indexShards map[string]bool // the shards the index names
	partial     bool            // Options.Modules: only their shards were read

	byModuleOnce sync.Once
	byModule     map[string]*scheme.Module
}

type indexState uint8

const (
	listedRight indexState = iota // weight_map names the shard that holds it
	listedWrong                   // weight_map names another shard
	unlisted                      // weight_map does not name it
)

type tensorLoc struct {
	shard *Shard
	t     *safetensors.Tensor
}

const (
	indexFile       = "model.safetensors.index.json"
	maxJSONFile     = 64 << 20
	defaultParallel = 20
)

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

// lookup finds where a tensor is stored: in the shard the index names when
// it holds it, else in the first shard that does.
func (c *Checkpoint) lookup(name string) (tensorLoc, bool) {
	if c.Index != nil {
		p, _ := c.Index.Shard(name)
		if sh := c.shardByPath[p]; sh != nil {
			if t, ok := sh.Header.Lookup(name); ok {
				return tensorLoc{shard: sh, t: t}, true
			}
		}
	}
	for _, sh := range c.Shards {
		if t, ok := sh.Header.Lookup(name); ok {
			return tensorLoc{shard: sh, t: t}, true
		}
	}
	return tensorLoc{}, false
}

// ReadTensor implements scheme.TensorReader over the shards.
func (c *Checkpoint) ReadTensor(name string, off, n int64) ([]byte, error) {
	loc, ok := c.lookup(name)
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", c.Source.Name(), name)
	}
	return loc.read(name, off, n)
}

func (loc tensorLoc) read(name string, off, n int64) ([]byte, error) {
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

// shapeValues reads a small integer tensor of one shard (weight_shape) for
// scheme.Group.
func (sh *Shard) shapeValues(name string) ([]int64, bool) {
	t, ok := sh.Header.Lookup(name)
	if !ok || t.NBytes() > 64 {
		return nil, false
	}
	b, err := tensorLoc{shard: sh, t: t}.read(name, 0, int64(t.NBytes()))
	if err != nil {
		return nil, false
	}
	var out []int64
	switch t.DType {
	case safetensors.I64:
		for i := 0; i+8 <= len(b); i += 8 {
			out = append(out, int64(binary.LittleEndian.Uint64(b[i:])))
		}
	case safetensors.I32:
		for i := 0; i+4 <= len(b); i += 4 {
			out = append(out, int64(int32(binary.LittleEndian.Uint32(b[i:]))))
		}
	default:
		return nil, false
	}
	return out, true
}

// Module finds a module by name, or the module that holds a tensor of that name.
func (c *Checkpoint) Module(name string) (*scheme.Module, bool) {
	if m, ok := c.moduleNamed(name); ok {
		return m, true
	}
	if loc, ok := c.lookup(name); ok {
		for _, sh := range c.Shards { // the tensor's module and role were recorded when grouped
			if sh != loc.shard {
				continue
			}
			for i := range sh.infos {
				if sh.infos[i].Name == name {
					return c.moduleNamed(sh.infos[i].Module)
				}
			}
		}
	}
	return nil, false
}

// moduleNamed is Module without the fallback to a tensor's name, which
// on a miss orders every shard's names for the lookup. Modules come
// sorted by name from the grouping: a binary search, no map, unless a
// caller built them otherwise.
func (c *Checkpoint) moduleNamed(name string) (*scheme.Module, bool) {
	c.byModuleOnce.Do(func() {
		if slices.IsSortedFunc(c.Modules, cmpModule) {
			return
		}
		c.byModule = make(map[string]*scheme.Module, len(c.Modules))
		for _, m := range c.Modules {
			c.byModule[m.Name] = m
		}
	})
	if c.byModule != nil {
		m, ok := c.byModule[name]
		return m, ok
	}
	i, ok := slices.BinarySearchFunc(c.Modules, name, func(m *scheme.Module, name string) int { return strings.Compare(m.Name, name) })
	if !ok {
		return nil, false
	}
	return c.Modules[i], true
}

// TensorNames lists every tensor, in shard then data order.
func (c *Checkpoint) TensorNames() []string {
	out := make([]string, len(c.tensors))
	for i, t := range c.tensors {
		out[i] = t.Name
	}
	return out
}

// Partial says the load read only the shards of Options.Modules: its
// modules, tensors and findings are those shards' (the repo-wide rules were
// not run), not the repo's.
func (c *Checkpoint) Partial() bool { return c.partial }

// moduleKeys are the module names a list of module or tensor names can
// mean, as a command finds its module (ops.FindModule): the name itself,
// the module of a tensor name, NAME of NAME.weight, and the stem of a
// gpt-oss `*_bias` (whose module is its stem's).
func moduleKeys(names []string) map[string]bool {
	keys := map[string]bool{}
	for _, n := range names {
		keys[n] = true
		m, _ := scheme.SplitName(n)
		keys[m] = true
		for _, suffix := range []string{".weight", "_bias"} {
			if stem, ok := strings.CutSuffix(n, suffix); ok {
				keys[stem] = true
			}
		}
	}
	return keys
}

// tensorOfAny says whether a tensor can belong to one of the modules keys
// names: its own module's name (scheme.SplitName), or, for gpt-oss's
// `*_bias`, which joins the module of its stem, the stem.
func tensorOfAny(name string, keys map[string]bool) bool {
	if keys[name] {
		return true
	}
	if m, _ := scheme.SplitName(name); keys[m] {
		return true
	}
	stem, ok := strings.CutSuffix(name, "_bias")
	return ok && keys[stem]
}

// holdsSelection says whether a partial load's shards hold exactly the
// index's entries of the selected modules, each where the index says: the
// count the index gave, none listed in another shard or unlisted.
func (c *Checkpoint) holdsSelection(keys map[string]bool, entries int) bool {
	n := 0
	for _, sh := range c.Shards {
		for i := range sh.infos {
			if !tensorOfAny(sh.infos[i].Name, keys) {
				continue
			}
			if n++; sh.listed != nil && sh.listed[i] != listedRight {
				return false
			}
		}
	}
	return n == entries
}
