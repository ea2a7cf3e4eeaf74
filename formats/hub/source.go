// Package hub is where a checkpoint's bytes come from: a Source lists a
// repo's files and reads them, whether they lie in a local directory, in one
// local .safetensors file, or (over a Fetcher) on a Hugging Face hub.
//
// Everything above the Source sees only List, ReadFile and Open, so the same
// inventory code runs on local files, natively over net/http, and in the
// browser over fetch.
package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/quantscope/quantscope/internal/userfile"
)

// File is one file of a repo.
type File struct {
	Path string `json:"path"` // slash-separated, relative to the repo root
	Size int64  `json:"size"` // bytes; -1 when the listing did not say
}

// Source is a checkpoint's files.
type Source interface {
	// Name says where the files are, for messages ("./dir", "org/name@main").
	Name() string
	// List returns every file of the repo, sorted by path.
	List(ctx context.Context) ([]File, error)
	// ReadFile reads a whole small file (a config), at most limit bytes; an
	// absent file gives an error wrapping fs.ErrNotExist.
	ReadFile(ctx context.Context, path string, limit int64) ([]byte, error)
	// Open gives random access to a file and its size. A reader that is also
	// an io.Closer is closed by whoever opened it.
	Open(ctx context.Context, path string) (io.ReaderAt, int64, error)
}

// Stats is what reading a Source cost over the network.
type Stats struct {
	Requests int64 `json:"requests"` // HTTP requests sent, each redirect hop counted
	Bytes    int64 `json:"bytes"`    // response body bytes received
}

// CommitSource is a Source that knows the commit its revision named when
// it was read ("" until an answer said it, or where nothing does).
type CommitSource interface {
	ResolvedCommit() string
}

// StatsSource is a Source that counts its traffic.
type StatsSource interface {
	Stats() Stats
}

// Preparer is a Source that can start work on files it will be asked to
// read (a remote one looks up their redirects ahead of time).
type Preparer interface {
	Prepare(ctx context.Context, paths []string)
}

// ErrTooLarge is wrapped when a config file exceeds the caller's limit.
var ErrTooLarge = errors.New("file larger than the limit")

// Dir is a repo in a local directory.
type Dir struct{ Root string }

// Name is the directory as given.
func (d *Dir) Name() string { return d.Root }

// List walks the directory, skipping hidden files and folders (.git, .cache).
func (d *Dir) List(ctx context.Context) ([]File, error) {
	var out []File
	err := filepath.WalkDir(d.Root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p != d.Root && strings.HasPrefix(e.Name(), ".") {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			return nil
		}
		info, err := os.Stat(p) // follows symlinks, as the hub's LFS pointers resolve
		if err != nil || !info.Mode().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(d.Root, p)
		if err != nil {
			return err
		}
		out = append(out, File{Path: filepath.ToSlash(rel), Size: info.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: listing: %w", d.Root, err)
	}
	slices.SortFunc(out, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

func (d *Dir) path(p string) (string, error) {
	if !fs.ValidPath(p) {
		return "", fmt.Errorf("%s: invalid path %q", d.Root, p)
	}
	return filepath.Join(d.Root, filepath.FromSlash(p)), nil
}

// ReadFile reads a small file of the directory.
func (d *Dir) ReadFile(ctx context.Context, p string, limit int64) ([]byte, error) {
	full, err := d.path(p)
	if err != nil {
		return nil, err
	}
	return readLimited(full, limit)
}

// readLimited reads a local file whole, within limit (userfile.Read: a
// regular file only, one buffer of its size, never past limit+1 bytes).
func readLimited(full string, limit int64) ([]byte, error) {
	b, err := userfile.Read(full, limit)
	if errors.Is(err, userfile.ErrTooLarge) {
		return nil, fmt.Errorf("%s: %w (%d bytes)", full, ErrTooLarge, limit)
	}
	return b, err
}

// Open opens a file of the directory; the reader is an *os.File, which the
// caller closes (checkpoint.Checkpoint.Close does).
func (d *Dir) Open(ctx context.Context, p string) (io.ReaderAt, int64, error) {
	full, err := d.path(p)
	if err != nil {
		return nil, 0, err
	}
	return openFile(full)
}

// openFile opens a regular file: a FIFO or a device named as a shard is
// refused, not waited on or read without end.
func openFile(full string) (io.ReaderAt, int64, error) {
	f, err := userfile.Open(full)
	if err != nil {
		return nil, 0, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, info.Size(), nil
}

// SingleFile is one local .safetensors file seen as a repo holding only it,
// and the config files beside it (a shard of a repo folder is read with the
// repo's config.json and hf_quant_config.json, as one file of a hub repo is;
// a file whose own __metadata__ says what it is keeps that: see
// checkpoint's adoptFileMetadata).
type SingleFile struct{ FilePath string }

// Name is the file as given.
func (s *SingleFile) Name() string { return s.FilePath }

// OneFile is a source that is one file of a repo, listed with the repo's
// config files (SingleFile; a Repo opened on one file).
type OneFile interface {
	OneFile() bool
}

// OneFile: always.
func (s *SingleFile) OneFile() bool { return true }

// siblingConfigs are the files of a repo folder read with one of its shards.
var siblingConfigs = []string{"config.json", "hf_quant_config.json"}

// List returns the one file and the config files beside it.
func (s *SingleFile) List(ctx context.Context) ([]File, error) {
	info, err := os.Stat(s.FilePath)
	if err != nil {
		return nil, err
	}
	files := []File{{Path: filepath.Base(s.FilePath), Size: info.Size()}}
	for _, name := range siblingConfigs {
		if fi, err := os.Stat(filepath.Join(filepath.Dir(s.FilePath), name)); err == nil && fi.Mode().IsRegular() && name != files[0].Path {
			files = append(files, File{Path: name, Size: fi.Size()})
		}
	}
	return files, nil
}

// ReadFile reads the file or a config file beside it.
func (s *SingleFile) ReadFile(ctx context.Context, p string, limit int64) ([]byte, error) {
	if p == filepath.Base(s.FilePath) {
		return readLimited(s.FilePath, limit)
	}
	if slices.Contains(siblingConfigs, p) {
		return readLimited(filepath.Join(filepath.Dir(s.FilePath), p), limit)
	}
	return nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
}

// Open opens the file.
func (s *SingleFile) Open(ctx context.Context, p string) (io.ReaderAt, int64, error) {
	if p != filepath.Base(s.FilePath) {
		return nil, 0, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	}
	return openFile(s.FilePath)
}

// OpenLocal turns a local path into a Source: a directory is a repo, a file a
// one-file repo.
func OpenLocal(path string) (Source, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		return &Dir{Root: path}, nil
	}
	return &SingleFile{FilePath: path}, nil
}

// Local marks the local sources, whose small reads cost no request.
func (d *Dir) Local() bool { return true }

// Local marks the local sources, whose small reads cost no request.
func (s *SingleFile) Local() bool { return true }
