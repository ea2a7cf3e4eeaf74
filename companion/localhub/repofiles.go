package localhub

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// What a repo folder holds, as the hub's answers describe it: its files
// (hidden ones left out, nothing outside the root), their briefly cached
// listing, the commit id and ETags derived from them, which files go to the
// CDN, and the revisions the folder answers to.

// listing is a repo's file list as of a moment; resolve answers read its
// commit id on every request, and walking the folder each time is wasted.
type listing struct {
	files []entry
	at    time.Time
}

const listingTTL = time.Second

type entry struct {
	path string
	size int64
}

// files lists a repo's files, hidden ones left out.
func (s *Server) files(dir string) ([]entry, error) {
	var out []entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		real, ok := s.inside(p)
		if !ok {
			return nil // a symlink out of the root is not part of the repo
		}
		info, err := os.Stat(real)
		if err != nil || !info.Mode().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, entry{path: filepath.ToSlash(rel), size: info.Size()})
		return nil
	})
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.path, b.path) })
	return out, err
}

func (s *Server) cachedFiles(dir string) []entry {
	s.mu.Lock()
	l, ok := s.listings[dir]
	s.mu.Unlock()
	if ok && time.Since(l.at) < listingTTL {
		return l.files
	}
	files, _ := s.files(dir)
	s.mu.Lock()
	s.listings[dir] = listing{files: files, at: time.Now()}
	s.mu.Unlock()
	return files
}

// commit is a stable id of the repo's current content.
func commit(files []entry) string {
	h := sha1.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s %d\n", f.path, f.size)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func etagOf(f entry) string {
	sum := sha1.Sum([]byte(fmt.Sprintf("%s %d", f.path, f.size)))
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

func isLFS(p string) bool {
	return strings.HasSuffix(p, ".safetensors") || strings.HasSuffix(p, ".bin") || strings.HasSuffix(p, ".gguf")
}

// knownRevision tells whether a repo folder answers to rev: "main", the
// commit id of its files, or a name in its RevisionsFile.
func knownRevision(dir string, files []entry, rev string) bool {
	if rev == "main" || rev == commit(files) {
		return true
	}
	b, err := os.ReadFile(filepath.Join(dir, RevisionsFile))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == rev {
			return true
		}
	}
	return false
}
