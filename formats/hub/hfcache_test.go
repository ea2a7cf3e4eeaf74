package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCache lays files out as huggingface_hub does: blobs named by their
// hash, snapshot entries as relative symlinks to them, refs/REV holding the
// commit.
func fakeCache(t *testing.T, hubDir, repo, commit string, refs []string, files map[string]string) string {
	t.Helper()
	org, name, _ := strings.Cut(repo, "/")
	root := filepath.Join(hubDir, "models--"+org+"--"+name)
	snap := filepath.Join(root, "snapshots", commit)
	for p, data := range files {
		sum := sha256.Sum256([]byte(data))
		blob := filepath.Join(root, "blobs", hex.EncodeToString(sum[:]))
		os.MkdirAll(filepath.Dir(blob), 0o755)
		if err := os.WriteFile(blob, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(snap, filepath.FromSlash(p))
		os.MkdirAll(filepath.Dir(link), 0o755)
		rel, _ := filepath.Rel(filepath.Dir(link), blob)
		if err := os.Symlink(rel, link); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range refs {
		ref := filepath.Join(root, "refs", filepath.FromSlash(r))
		os.MkdirAll(filepath.Dir(ref), 0o755)
		os.WriteFile(ref, []byte(commit), 0o644) // huggingface_hub writes no newline
	}
	return snap
}

const (
	commitA = "0123456789abcdef0123456789abcdef01234567"
	commitB = "89abcdef0123456789abcdef0123456789abcdef"
)

func TestCacheDir(t *testing.T) {
	t.Setenv("HF_HUB_CACHE", "/a/hub")
	t.Setenv("HF_HOME", "/b")
	if d := CacheDir(); d != "/a/hub" {
		t.Errorf("HF_HUB_CACHE: %s", d)
	}
	t.Setenv("HF_HUB_CACHE", "")
	if d := CacheDir(); d != filepath.Join("/b", "hub") {
		t.Errorf("HF_HOME: %s", d)
	}
	t.Setenv("HF_HOME", "")
	t.Setenv("HOME", "/home/u")
	if d := CacheDir(); d != filepath.Join("/home/u", ".cache", "huggingface", "hub") {
		t.Errorf("home: %s", d)
	}
}

func TestFindCached(t *testing.T) {
	hubDir := t.TempDir()
	idx := `{"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`
	snapA := fakeCache(t, hubDir, "org/full", commitA, []string{"main", "refs/pr/1"}, map[string]string{
		"config.json": "{}", indexName: idx,
		"model-00001-of-00002.safetensors": "one", "model-00002-of-00002.safetensors": "two",
	})
	fakeCache(t, hubDir, "org/full", commitB, []string{"v2"}, map[string]string{"model.safetensors": "single"})
	fakeCache(t, hubDir, "org/partial", commitA, []string{"main"}, map[string]string{
		"config.json": "{}", indexName: idx, "model-00001-of-00002.safetensors": "one",
	})

	for _, rev := range []string{"", "main", "refs/pr/1", commitA} {
		c, err := FindCached(hubDir, "org/full", rev, "")
		if err != nil {
			t.Fatalf("rev %q: %v", rev, err)
		}
		if c.Commit != commitA || c.Path != snapA {
			t.Fatalf("rev %q: commit %s path %s", rev, c.Commit, c.Path)
		}
		files, err := c.List(context.Background())
		if err != nil || len(files) != 4 {
			t.Fatalf("rev %q: listed %v %v", rev, files, err)
		}
		b, err := c.ReadFile(context.Background(), "model-00002-of-00002.safetensors", 100)
		if err != nil || string(b) != "two" {
			t.Fatalf("read through the blob symlink: %q %v", b, err)
		}
		if kind, where := Origin(c); kind != "hf-cache" || where != snapA {
			t.Fatalf("Origin %s %s", kind, where)
		}
	}
	c, err := FindCached(hubDir, "org/full", "v2", "")
	if err != nil || c.Commit != commitB {
		t.Fatalf("tag v2: %+v %v", c, err)
	}
	c, err = FindCached(hubDir, "org/full", "", "model-00001-of-00002.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	// one file of the snapshot, with the repo's config beside it (as one
	// file of a hub repo is listed)
	if files, _ := c.List(context.Background()); len(files) != 2 || files[0].Size != 3 || files[1].Path != "config.json" {
		t.Fatalf("one file: %v", files)
	}
	if !c.OneFile() {
		t.Error("a cached file is not one file (its own __metadata__ would lose to the snapshot's config)")
	}
	if whole, err := FindCached(hubDir, "org/full", "", ""); err != nil || whole.OneFile() {
		t.Errorf("a cached snapshot reads as one file: %v", err)
	}

	for what, args := range map[string][3]string{
		"absent repo":       {"org/none", "", ""},
		"absent revision":   {"org/full", "dev", ""},
		"absent commit":     {"org/full", strings.Repeat("f", 40), ""},
		"partial snapshot":  {"org/partial", "main", ""},
		"absent file":       {"org/full", "main", "nope.safetensors"},
		"escaping revision": {"org/full", "../../x", ""},
	} {
		_, err := FindCached(hubDir, args[0], args[1], args[2])
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want an fs.ErrNotExist", what, err)
		}
	}
	if _, err := FindCached(hubDir, "org/partial", "main", ""); err == nil || !strings.Contains(err.Error(), "model-00002-of-00002.safetensors is missing") {
		t.Errorf("partial snapshot error does not name the missing shard: %v", err)
	}
	if kind, _ := Origin(&Dir{Root: "."}); kind != "local" {
		t.Errorf("Dir origin %s", kind)
	}
}
