package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/quantscope/quantscope/formats/hub"
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
	// (a load of a few modules' shards, which an index will name, looks
	// up no redirect ahead: most of the shards it will not read)
	_, indexed := sizes[indexFile]
	if p, ok := src.(hub.Preparer); ok && !(indexed && len(opt.Modules) > 0) {
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
	var keys map[string]bool // with opt.Modules: the module names they can mean
	entries := 0             // and the index's entries of those modules
	if idx != nil {
		var wanted map[string]bool // the shards holding those entries
		var each func(name, shard string)
		if len(opt.Modules) > 0 {
			keys = moduleKeys(opt.Modules)
			wanted = map[string]bool{}
			each = func(name, shard string) {
				if tensorOfAny(name, keys) {
					wanted[strings.Clone(shard)] = true // not a view that keeps the index alive
					entries++
				}
			}
		}
		if c.Index, err = parseIndexEach(idx, each); err != nil {
			return nil, fmt.Errorf("%s: %w", src.Name(), err) // which repo's index, as a shard's error says
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
		if len(wanted) > 0 && len(wanted) < len(shardPaths) {
			shardPaths = slices.DeleteFunc(shardPaths, func(p string) bool { return !wanted[p] })
			c.partial = true
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
	if c.partial && !c.holdsSelection(keys, entries) {
		// The index misplaces a tensor of the modules (names a shard that
		// does not hold it, or leaves it out): what the selection read is
		// not the module. Read the repo whole; its findings say what is
		// wrong.
		c.Close()
		opt.Modules = nil
		return Load(ctx, src, opt)
	}
	if err := c.adoptFileMetadata(opt); err != nil {
		c.Close()
		return nil, err
	}
	c.assemble(opt)
	opt.trace("assembled")
	if !c.partial { // the repo-wide rules need every shard
		c.Findings = append(c.Findings, c.checkRepo(ctx)...)
	}
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
