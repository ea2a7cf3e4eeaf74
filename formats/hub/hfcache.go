package hub

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/quantscope/quantscope/internal/userfile"
)

// The Hugging Face cache on this machine, as huggingface_hub lays it out:
//
//	HUB/models--ORG--NAME/refs/REV         the commit REV points at
//	HUB/models--ORG--NAME/snapshots/COMMIT/PATH -> ../../blobs/HASH
//	HUB/models--ORG--NAME/blobs/HASH       the bytes
//
// where HUB is $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub.
// Reading it needs no network: a repo found there at the asked revision is
// read from local files.

// CacheDir is this machine's Hugging Face hub cache folder (which may not
// exist).
func CacheDir() string {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "huggingface", "hub")
}

// Cached is a repo (or one file of it) read from the Hugging Face cache. It is
// a local Source.
type Cached struct {
	Source          // a Dir on the snapshot, or a SingleFile in it
	Repo     string // ORG/NAME
	Revision string // as asked ("main" when none was)
	Commit   string
	Path     string // the snapshot folder, or the file for a one-file source
	file     string // the repo path of a one-file source
}

// OneFile says whether the cached source is one file of the snapshot.
func (c *Cached) OneFile() bool {
	o, ok := c.Source.(OneFile)
	return ok && o.OneFile()
}

// Name is the repo as the user named it, ORG/NAME@REV (and :FILE for one
// file of it), as the hub's copy is named: scripts keyed on the repo's name
// find it whether it was read from the cache or the network (Origin says
// which, and where).
func (c *Cached) Name() string {
	if c.file != "" {
		return c.Repo + "@" + c.Revision + ":" + c.file
	}
	return c.Repo + "@" + c.Revision
}

// ResolvedCommit is the snapshot's commit.
func (c *Cached) ResolvedCommit() string { return c.Commit }

// Local marks the cache as local: small reads cost no request.
func (c *Cached) Local() bool { return true }

// isCommit reports whether rev is a full commit hash.
func isCommit(rev string) bool {
	if len(rev) != 40 {
		return false
	}
	for _, c := range rev {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// FindCached looks in the cache folder hubDir for repo at rev (a branch, tag,
// refs/pr/N or a commit hash; "" means main) and, for a one-file source, the
// file at filePath. It returns the cached source, or an error wrapping
// fs.ErrNotExist that says why the cache cannot serve it: absent, another
// revision only, or a snapshot missing files the index names (a partial
// download).
func FindCached(hubDir, repo, rev, filePath string) (*Cached, error) {
	if err := checkRepoID(repo); err != nil {
		return nil, err
	}
	if rev == "" {
		rev = "main"
	}
	if hubDir == "" {
		return nil, fmt.Errorf("no Hugging Face cache folder: %w", fs.ErrNotExist)
	}
	if !fs.ValidPath(rev) || strings.Contains(rev, `\`) {
		return nil, fmt.Errorf("revision %q cannot name a cache entry: %w", rev, fs.ErrNotExist)
	}
	org, name, _ := strings.Cut(repo, "/")
	root := filepath.Join(hubDir, "models--"+org+"--"+name)
	commit := rev
	if !isCommit(rev) {
		b, err := userfile.Read(filepath.Join(root, "refs", filepath.FromSlash(rev)), maxRef) // a FIFO or device there is not a ref
		if err != nil {
			return nil, fmt.Errorf("%s@%s is not in the Hugging Face cache at %s: %w", repo, rev, hubDir, fs.ErrNotExist)
		}
		commit = strings.TrimSpace(string(b))
		if !isCommit(commit) {
			return nil, fmt.Errorf("%s: refs/%s holds %q, not a commit: %w", root, rev, commit, fs.ErrNotExist)
		}
	}
	snap := filepath.Join(root, "snapshots", commit)
	if info, err := os.Stat(snap); err != nil || !info.IsDir() {
		return nil, fmt.Errorf("%s@%s (commit %s) is not in the Hugging Face cache at %s: %w", repo, rev, commit, hubDir, fs.ErrNotExist)
	}
	c := &Cached{Repo: repo, Revision: rev, Commit: commit, Path: snap}
	if filePath != "" {
		if !fs.ValidPath(filePath) {
			return nil, fmt.Errorf("%s: invalid path %q: %w", repo, filePath, fs.ErrNotExist)
		}
		full := filepath.Join(snap, filepath.FromSlash(filePath))
		if info, err := os.Stat(full); err != nil || !info.Mode().IsRegular() {
			return nil, fmt.Errorf("%s@%s: %s is not in the Hugging Face cache at %s: %w", repo, rev, filePath, snap, fs.ErrNotExist)
		}
		c.Source, c.Path, c.file = &SingleFile{FilePath: full}, full, filePath
		return c, nil
	}
	if err := completeSnapshot(snap); err != nil {
		return nil, &PartialSnapshotError{fmt.Sprintf("%s@%s: the Hugging Face cache at %s holds only part of it (%v)", repo, rev, snap, err)}
	}
	c.Source = &Dir{Root: snap}
	return c, nil
}

// PartialSnapshotError is FindCached's error for a snapshot that lacks
// shards (a download cut short, or the configs alone). It is an
// fs.ErrNotExist, as a repo the cache does not hold; its own type lets a
// caller that reads the hub instead say why.
type PartialSnapshotError struct{ msg string }

func (e *PartialSnapshotError) Error() string        { return e.msg }
func (e *PartialSnapshotError) Is(target error) bool { return target == fs.ErrNotExist }

// maxRef bounds a refs file (a 40-hex commit and a newline); maxCachedIndex
// a snapshot's index, as checkpoint bounds any JSON file of a repo.
const (
	maxRef         = 4 << 10
	maxCachedIndex = 64 << 20
)

// completeSnapshot checks that a snapshot holds every shard its index names
// (huggingface_hub downloads file by file, so a snapshot may hold only the
// configs), or, without an index, at least one .safetensors file.
func completeSnapshot(snap string) error {
	regular := func(p string) bool {
		info, err := os.Stat(filepath.Join(snap, filepath.FromSlash(p))) // follows the blob symlink
		return err == nil && info.Mode().IsRegular()
	}
	b, err := userfile.Read(filepath.Join(snap, indexName), maxCachedIndex)
	if err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &idx); err != nil {
			return fmt.Errorf("%s: %v", indexName, err)
		}
		for _, shard := range idx.WeightMap {
			if !fs.ValidPath(shard) || !regular(shard) {
				return fmt.Errorf("shard %s is missing", shard)
			}
		}
		return nil
	}
	entries, err := os.ReadDir(snap)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if path.Ext(e.Name()) == ".safetensors" && regular(e.Name()) {
			return nil
		}
	}
	return fmt.Errorf("no .safetensors file")
}

const indexName = "model.safetensors.index.json"

// Origin says where a source's bytes come from, for messages: "hf-cache"
// with the snapshot (or file) path, "local" with the path, or "network" with
// the source's name.
func Origin(src Source) (kind, where string) {
	switch s := src.(type) {
	case *Cached:
		return "hf-cache", s.Path
	case interface{ Local() bool }:
		return "local", src.Name()
	}
	return "network", src.Name()
}
