package localhub

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A repo answers to "main", to its commit id and to the names in its
// RevisionsFile; any other revision is a 404 "revision not found" on every
// route, as on the hub, never main's files.
func TestUnknownRevision(t *testing.T) {
	root, srv, _ := setup(t)
	resp, _ := get(t, srv.URL+"/org/model/resolve/main/config.json", nil)
	sha := resp.Header.Get("X-Repo-Commit")
	if len(sha) != 40 {
		t.Fatalf("commit id %q", sha)
	}
	os.WriteFile(filepath.Join(root, "org", "model", RevisionsFile), []byte("v1.0\nrefs-pr-1\nrefs/pr/1\nfeature/x\n"), 0o644)
	routes := []string{
		"/api/models/org/model/revision/%s",
		"/api/models/org/model/tree/%s?recursive=true",
		"/org/model/resolve/%s/config.json",
		"/org/model/resolve/%s/model.safetensors",
		"/org/model/raw/%s/config.json",
		"/cdn/org/model/%s/model.safetensors",
	}
	other := sha[:39] + "0"
	if sha[39] == '0' {
		other = sha[:39] + "1"
	}
	for _, route := range routes {
		// a revision with slashes travels as one escaped segment
		for _, rev := range []string{"main", sha, "v1.0", "refs-pr-1", "refs%2Fpr%2F1", "feature%2Fx"} {
			resp, _ := get(t, srv.URL+strings.Replace(route, "%s", rev, 1), nil)
			if resp.StatusCode != 200 && resp.StatusCode != 302 {
				t.Errorf("%s at %s: %d", route, rev, resp.StatusCode)
			}
		}
		for _, rev := range []string{"nope", other, "Main", "v1"} {
			resp, body := get(t, srv.URL+strings.Replace(route, "%s", rev, 1), nil)
			if resp.StatusCode != 404 || resp.Header.Get("X-Error-Code") != "RevisionNotFound" || !strings.Contains(body, "Revision not found: "+rev) {
				t.Errorf("%s at %s: %d %q %q", route, rev, resp.StatusCode, resp.Header.Get("X-Error-Code"), body)
			}
		}
	}
	// An escaped slash anywhere but in the revision is refused.
	for _, p := range []string{"/org%2Fmodel/resolve/main/config.json", "/org/model/resolve/main/sub%2F..%2Fconfig.json", "/api/models/org%2Fmodel/revision/main"} {
		if resp, _ := get(t, srv.URL+p, nil); resp.StatusCode != 400 && resp.StatusCode != 404 {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
	// The revisions file is not part of the repo.
	if resp, _ := get(t, srv.URL+"/org/model/resolve/main/"+RevisionsFile, nil); resp.StatusCode != 404 {
		t.Errorf("the revisions file is served: %d", resp.StatusCode)
	}
}
