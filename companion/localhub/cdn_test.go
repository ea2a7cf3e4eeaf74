package localhub

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With Options.CDN the 302 points at another origin, where the same server
// answers the signed URL without the token (a browser drops Authorization on
// a redirect to another origin), with CORS; a tampered or unsigned CDN URL of
// a gated repo is refused.
func TestCDNOnAnotherOrigin(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "org", "model")
	os.MkdirAll(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "model.safetensors"), []byte("0123456789"), 0o644)
	os.WriteFile(filepath.Join(repo, GatedFile), []byte("tok\n"), 0o644)
	cdn := httptest.NewUnstartedServer(nil)
	s, err := New(root, Options{CDN: "http://" + cdn.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	cdn.Config.Handler = s
	cdn.Start()
	defer cdn.Close()
	hubSrv := httptest.NewServer(s)
	defer hubSrv.Close()

	resp, _ := get(t, hubSrv.URL+"/org/model/resolve/main/model.safetensors", map[string]string{"Authorization": "Bearer tok"})
	loc := resp.Header.Get("Location")
	if resp.StatusCode != 302 || !strings.HasPrefix(loc, cdn.URL+"/cdn/org/model/main/model.safetensors?expires=") {
		t.Fatalf("302 to %q (status %d), want the CDN origin %s", loc, resp.StatusCode, cdn.URL)
	}
	resp, body := get(t, loc, map[string]string{"Range": "bytes=2-4", "Origin": "http://page.test"})
	if resp.StatusCode != 206 || body != "234" || resp.Header.Get("Access-Control-Allow-Origin") != "http://page.test" {
		t.Fatalf("signed CDN URL without token: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	for _, bad := range []string{
		cdn.URL + "/cdn/org/model/main/model.safetensors",
		strings.Replace(loc, "sig=", "sig=0", 1),
		strings.Replace(loc, "model.safetensors?", "model.safetensors?x=1&", 1) + "0", // another expiry
	} {
		if resp, _ := get(t, bad, map[string]string{"Range": "bytes=2-4"}); resp.StatusCode != 401 {
			t.Errorf("%s: %d, want 401", bad, resp.StatusCode)
		}
	}
	if req, _ := s.Stats(); req != 5 {
		t.Errorf("%d requests counted across both origins, want 5", req)
	}
}
