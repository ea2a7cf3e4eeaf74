package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/quantscope/quantscope/formats/hub"
	"github.com/quantscope/quantscope/formats/safetensors"
	"github.com/quantscope/quantscope/formats/scheme"
)

// Load reads a checkpoint from a source.
//
// The work is arranged around the network: the listing first; then at once
// the configs, the index and (for a remote repo) each likely shard's redirect;
// then every shard's header, each shard's tensors grouped into modules and
// checked as soon as its header is in; last, the shards' results merged and
// the repo-wide rules applied.
func Load(ctx context.Context, src hub.Source, opt Options) (*Checkpoint, error) {
	files, err := src.List(ctx)
	if err != nil {
		return nil, err
	}
	opt.trace("listed")
	c := &Checkpoint{Source: src, Files: files}
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
	opt.trace("configs fetched")
	var shardPaths []string
	perShard := map[string]shardHint{}
	if idx != nil {
		if c.Index, err = parseIndex(idx); err != nil {
			return nil, err
		}
		if len(idx) >= 4<<20 {
			// The index is the largest thing a load reads, and nothing of it
			// is kept: collect it now (the heap is small yet), so that the
			// headers' allocations reuse its memory instead of faulting in
			// as much again (`inspect` runs with the collector off; the
			// page's wasm memory never shrinks).
			idx = nil
			runtime.GC()
		}
		c.Index.Shards(func(p string, h shardHint) { // the index sits at the root: its paths are repo paths
			shardPaths = append(shardPaths, p)
			perShard[p] = h
		})
		slices.Sort(shardPaths)
		c.indexShards = make(map[string]bool, len(shardPaths))
		for _, p := range shardPaths {
			c.indexShards[p] = true
			if _, ok := sizes[p]; !ok {
				return nil, fmt.Errorf("%s: %s: rule index-missing-shard: weight_map names shard %q, which the repo does not have", src.Name(), indexFile, p)
			}
		}
	} else if shardPaths, c.setAside, err = unindexedShards(src.Name(), files); err != nil {
		return nil, err
	}
	if len(shardPaths) == 0 {
		if one, ok := src.(hub.OneFile); ok && one.OneFile() {
			return nil, fmt.Errorf("%s: rule no-safetensors: not a .safetensors file (give a .safetensors shard, or the folder or repo holding the checkpoint)", src.Name())
		}
		return nil, fmt.Errorf("%s: rule no-safetensors: the repo holds no .safetensors files", src.Name())
	}
	if c.Scheme, err = scheme.Detect(c.Config, c.HFQuant); err != nil {
		one, ok := src.(hub.OneFile)
		if !ok || !one.OneFile() {
			return nil, fmt.Errorf("%s: %w", src.Name(), err)
		}
		// One file named on its own: the config files beside it are a
		// courtesy, and one that cannot be read costs the file nothing.
		c.Config, c.HFQuant = nil, nil
		c.Scheme, _ = scheme.Detect(nil, nil)
		c.siblingNote = fmt.Sprintf("the config files beside the file were set aside: %v", err)
	}
	opt.trace("index parsed")
	if err := c.readHeaders(ctx, shardPaths, perShard, opt); err != nil { // with KeepGoing: no shard could be read
		c.Close()
		return nil, err
	}
	opt.trace("headers read")
	if err := c.adoptFileMetadata(opt); err != nil {
		c.Close()
		return nil, err
	}
	c.assemble(opt)
	opt.trace("assembled")
	c.Findings = append(c.Findings, c.checkRepo(ctx)...)
	if c.siblingNote != "" {
		c.Findings = append(c.Findings, scheme.Finding{Rule: RuleSiblingConfig, Severity: scheme.SeverityWarning, Message: c.siblingNote})
	}
	sortFindings(c.Findings)
	opt.trace("checked")
	return c, nil
}

// likelyShards guesses, before the index is read, which files it will name:
// with an index, the files of the hub's sharded naming (…-00001-of-00009…);
// without one, every .safetensors file.
func likelyShards(files []hub.File, sizes map[string]int64) []string {
	if _, indexed := sizes[indexFile]; !indexed {
		shards, _, _ := unindexedShards("", files) // those the load will read; none when it refuses
		return shards
	}
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f.Path, ".safetensors") && strings.Contains(f.Path, "-of-") && !strings.Contains(f.Path, "/") {
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
	for i, p := range paths {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sh, err := readShard(ctx, c.Source, p, headerGuess(perShard[p]))
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
	for i, err := range errs {
		if err != nil {
			errs[i] = inSource(c.Source, paths[i], err)
		}
	}
	return errors.Join(errs...)
}

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

// sharedReader is a reader that can hand out the bytes it fetched instead
// of copying them (hub.RemoteFile); the caller never changes them.
type sharedReader interface {
	ReadShared(off, n int64) ([]byte, error)
}

// readShard reads a header in one read of a guessed prefix, and a second,
// exact one only when the guess was short.
func readShard(ctx context.Context, src hub.Source, p string, guess int64) (*Shard, error) {
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
	var buf []byte
	got := 0
	if sr, ok := r.(sharedReader); ok {
		buf, err = sr.ReadShared(0, n) // the fetched bytes themselves, not a copy
		got = len(buf)
	} else {
		buf = make([]byte, n)
		got, err = r.ReadAt(buf, 0)
	}
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
	if s.Header, err = safetensors.ParseOwnedPrefix(p, buf, size); err != nil {
		closeReader(r)
		return nil, err
	}
	return s, nil
}

// assemble merges the shards' results: the tensors in shard then data
// order (a tensor stored twice kept once), the modules in name order (one
// split across shards grouped again as a whole), their findings.
func (c *Checkpoint) assemble(opt Options) {
	c.shardByPath = make(map[string]*Shard, len(c.Shards))
	n := 0
	for _, sh := range c.Shards {
		c.shardByPath[sh.Path] = sh
		n += len(sh.infos)
	}
	kept := c.findDuplicates()
	// The shards' infos already lie in shard order in one slice: use it.
	shared := len(kept) == 0 && c.allInfos != nil
	at := 0
	for _, sh := range c.Shards {
		if len(sh.infos) > 0 && (at >= len(c.allInfos) || &sh.infos[0] != &c.allInfos[at]) {
			shared = false
			break
		}
		at += len(sh.infos)
	}
	if shared {
		c.tensors = c.allInfos[:at:at] // sh.infos are views into it
	} else {
		c.tensors = make([]scheme.TensorInfo, 0, n)
	}
	c.allInfos = nil
	c.locs = make([]tensorLoc, 0, n)
	if c.Index != nil {
		c.listed = make([]indexState, 0, n)
	}
	for _, sh := range c.Shards {
		for i := range sh.infos {
			if k, dup := kept[sh.infos[i].Name]; dup && k != sh {
				continue
			}
			if !shared {
				c.tensors = append(c.tensors, sh.infos[i])
			}
			c.locs = append(c.locs, tensorLoc{shard: sh, t: &sh.Header.Tensors[i]})
			if c.Index != nil {
				c.listed = append(c.listed, sh.listed[i])
			}
		}
	}
	if len(kept) > 0 {
		// Rare: group the whole repo again so no module holds a dropped copy.
		c.Modules = scheme.Group(c.tensors, c.Scheme, c.shapeValues(opt))
		c.Findings = append(c.Findings, scheme.CheckModules(c.Modules, c.Scheme)...)
		return
	}
	c.Modules, c.Findings = c.mergeModules(c.Findings, c.shapeValues(opt))
}

// shapeValues reads weight_shape values for a grouping of tensors from
// any shard (from the copy lookup finds), or is nil when opt does not ask
// for them.
func (c *Checkpoint) shapeValues(opt Options) scheme.ShapeValues {
	if !opt.ReadShapeTensors {
		return nil
	}
	return func(name string) ([]int64, bool) {
		if loc, ok := c.lookup(name); ok {
			return loc.shard.shapeValues(name)
		}
		return nil, false
	}
}

// mergeModules k-way merges the shards' sorted module lists. A module whose
// tensors lie in several shards is grouped again from all of them, its
// weight_shape read through shapes (nil: not read).
func (c *Checkpoint) mergeModules(findings []scheme.Finding, shapes scheme.ShapeValues) ([]*scheme.Module, []scheme.Finding) {
	total := 0
	for _, sh := range c.Shards {
		total += len(sh.modules)
		findings = append(findings, sh.findings...)
	}
	if len(c.Shards) == 1 {
		return c.Shards[0].modules, findings
	}
	// Shards mostly hold consecutive layers, so the concatenation is nearly
	// sorted already; equal neighbours after the sort are split modules.
	all := make([]*scheme.Module, 0, total)
	for _, sh := range c.Shards {
		all = append(all, sh.modules...)
	}
	if !slices.IsSortedFunc(all, cmpModule) {
		slices.SortStableFunc(all, cmpModule)
	}
	out := all[:0]
	var split map[string]bool
	for _, m := range all {
		if len(out) > 0 && out[len(out)-1].Name == m.Name {
			if split == nil {
				split = map[string]bool{}
			}
			split[m.Name] = true
			continue
		}
		out = append(out, m)
	}
	if split == nil {
		return out, findings
	}
	// Group the split modules' tensors together, replace them, and check
	// them again (their per-shard findings no longer apply).
	var parts []scheme.TensorInfo
	var from []int // parts[j] is c.tensors[from[j]]
	for i := range c.tensors {
		if split[c.tensors[i].Module] {
			parts = append(parts, c.tensors[i])
			from = append(from, i)
		}
	}
	regrouped := scheme.Group(parts, c.Scheme, shapes)
	byName := map[string]*scheme.Module{}
	for _, m := range regrouped {
		byName[m.Name] = m
	}
	for i, m := range out {
		if r, ok := byName[m.Name]; ok {
			out[i] = r
		}
	}
	for j, i := range from { // record where the regrouped tensors now belong
		c.tensors[i].Module, c.tensors[i].Role = parts[j].Module, parts[j].Role
	}
	findings = slices.DeleteFunc(findings, func(f scheme.Finding) bool { return split[f.Module] })
	findings = append(findings, scheme.CheckModules(regrouped, c.Scheme)...)
	return out, findings
}

func cmpModule(a, b *scheme.Module) int { return strings.Compare(a.Name, b.Name) }

// findDuplicates finds tensors stored in more than one shard, reports each
// once, and says which copy is counted (name → the shard whose copy is
// kept; every other copy goes): the one in the shard the index names, else
// the first. With an index whose every name sits in the shard it names, no
// search is needed.
func (c *Checkpoint) findDuplicates() map[string]*Shard {
	if len(c.Shards) < 2 {
		return nil
	}
	total := 0
	for _, sh := range c.Shards {
		total += len(sh.infos)
	}
	if c.Index != nil && total == c.Index.Len() {
		clean := true
		for _, sh := range c.Shards {
			for _, st := range sh.listed {
				clean = clean && st == listedRight
			}
		}
		if clean { // n distinct names, each held by the shard that lists it: no copies
			return nil
		}
	}
	seen := make(map[string]*Shard, total)
	var holders map[string][]*Shard // a name stored more than once: its shards, in order
	var names []string              // those names, in order of their second copy
	for _, sh := range c.Shards {
		for i := range sh.infos {
			name := sh.infos[i].Name
			first, dup := seen[name]
			if !dup {
				seen[name] = sh
				continue
			}
			if holders == nil {
				holders = map[string][]*Shard{}
			}
			if holders[name] == nil {
				holders[name] = []*Shard{first}
				names = append(names, name)
			}
			holders[name] = append(holders[name], sh)
		}
	}
	if holders == nil {
		return nil
	}
	kept := make(map[string]*Shard, len(names))
	for _, name := range names {
		kept[name] = c.keepCopy(name, holders[name])
	}
	return kept
}

// keepCopy picks the counted copy of a tensor stored in several shards (the
// index's, else the first) and reports the copies.
func (c *Checkpoint) keepCopy(name string, shards []*Shard) *Shard {
	keep := shards[0]
	if p, ok := c.Index.Shard(name); ok {
		for _, sh := range shards {
			if sh.Path == p {
				keep = sh
			}
		}
	}
	paths := make([]string, len(shards))
	for i, sh := range shards {
		paths[i] = sh.Path
	}
	where := "both " + paths[0] + " and " + paths[1]
	if len(paths) > 2 {
		where = strings.Join(paths[:len(paths)-1], ", ") + " and " + paths[len(paths)-1]
	}
	c.Findings = append(c.Findings, scheme.Finding{Rule: "duplicate-tensor", Severity: scheme.SeverityError, Tensor: name,
		Message: fmt.Sprintf("tensor is stored in %s; the copy in %s is counted", where, keep.Path)})
	return keep
}

// unindexedShards picks the shards of a repo without an index as loaders
// do: the .safetensors files at its top (transformers reads model.safetensors
// there), with those in subfolders set aside. With none at the top, the
// files of one subfolder are the model (a diffusers-style layout); files in
// several subfolders are several models (a folder of repos, variants side by
// side), which one inventory would merge into nonsense: refused.
func unindexedShards(name string, files []hub.File) (shards, aside []string, err error) {
	dirs := map[string]bool{}
	for _, f := range files {
		if !strings.HasSuffix(f.Path, ".safetensors") {
			continue
		}
		if !strings.Contains(f.Path, "/") {
			shards = append(shards, f.Path)
			continue
		}
		aside = append(aside, f.Path)
		dirs[path.Dir(f.Path)] = true
	}
	if len(shards) > 0 || len(aside) == 0 {
		return shards, aside, nil
	}
	if len(dirs) == 1 {
		return aside, nil, nil
	}
	list := slices.Sorted(maps.Keys(dirs))
	more := ""
	if len(list) > 4 {
		list, more = list[:4], fmt.Sprintf(" and %d more", len(list)-4)
	}
	return nil, nil, fmt.Errorf("%s: rule no-safetensors: no .safetensors file at the top of the repo and no index, while %d folders hold some (%s/%s): they are separate models; give one folder as SOURCE",
		name, len(dirs), strings.Join(list, "/, "), more)
}
