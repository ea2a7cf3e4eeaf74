package localhub

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func setup(t *testing.T) (string, *httptest.Server, *Server) {
	t.Helper()
	root := t.TempDir()
	repo := filepath.Join(root, "org", "model")
	os.MkdirAll(filepath.Join(repo, "sub"), 0o755)
	data := make([]byte, 1000)
	for i := range data {
		data[i] = byte(i)
	}
	os.WriteFile(filepath.Join(repo, "model.safetensors"), data, 0o644)
	os.WriteFile(filepath.Join(repo, "config.json"), []byte(`{"a":1}`), 0o644)
	os.WriteFile(filepath.Join(repo, "sub", "x.txt"), []byte("hello"), 0o644)
	os.WriteFile(filepath.Join(repo, ".hidden"), []byte("no"), 0o644)
	outside := filepath.Join(t.TempDir(), "secret.txt")
	os.WriteFile(outside, []byte("secret"), 0o644)
	os.Symlink(outside, filepath.Join(repo, "escape.txt"))
	os.Symlink(filepath.Join(repo, "config.json"), filepath.Join(repo, "alias.json"))
	s, err := New(root, Options{PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return root, srv, s
}

func get(t *testing.T, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func TestRangesAndRedirect(t *testing.T) {
	root, srv, _ := setup(t)
	os.WriteFile(filepath.Join(root, "org", "model", "sub", "empty.txt"), nil, 0o644)
	resp, _ := get(t, srv.URL+"/org/model/resolve/main/model.safetensors", nil)
	if resp.StatusCode != 302 || resp.Header.Get("X-Linked-Size") != "1000" || resp.Header.Get("X-Linked-ETag") == "" ||
		resp.Header.Get("X-Repo-Commit") == "" || resp.Header.Get("ETag") == "" || !strings.HasPrefix(resp.Header.Get("Location"), "/cdn/org/model/main/model.safetensors") {
		t.Fatalf("302: %d %v", resp.StatusCode, resp.Header)
	}
	cdn := srv.URL + resp.Header.Get("Location")
	for _, c := range []struct {
		rng, body, cr string
		code          int
	}{
		{"bytes=0-3", "\x00\x01\x02\x03", "bytes 0-3/1000", 206},
		{"bytes=998-", "\xe6\xe7", "bytes 998-999/1000", 206},
		{"bytes=-2", "\xe6\xe7", "bytes 998-999/1000", 206},
		{"bytes=990-5000", "\xde\xdf\xe0\xe1\xe2\xe3\xe4\xe5\xe6\xe7", "bytes 990-999/1000", 206},
		{"bytes=1000-", "", "bytes */1000", 416},
		{"bytes=5-2", "", "bytes */1000", 416},
	} {
		resp, body := get(t, cdn, map[string]string{"Range": c.rng})
		if resp.StatusCode != c.code || resp.Header.Get("Content-Range") != c.cr || (c.code == 206 && body != c.body) {
			t.Errorf("%s: %d %q %q", c.rng, resp.StatusCode, resp.Header.Get("Content-Range"), body)
		}
	}
	resp, body := get(t, cdn, nil)
	if resp.StatusCode != 200 || len(body) != 1000 {
		t.Errorf("whole file: %d %d", resp.StatusCode, len(body))
	}
	// An empty file has no byte to give to any range, a suffix one included.
	for _, rng := range []string{"bytes=-5", "bytes=0-"} {
		resp, _ := get(t, srv.URL+"/org/model/resolve/main/sub/empty.txt", map[string]string{"Range": rng})
		if resp.StatusCode != 416 || resp.Header.Get("Content-Range") != "bytes */0" {
			t.Errorf("empty file, %s: %d %q, want 416 bytes */0", rng, resp.StatusCode, resp.Header.Get("Content-Range"))
		}
	}
	// A small file is served straight from resolve, with Range too.
	resp, body = get(t, srv.URL+"/org/model/resolve/main/config.json", map[string]string{"Range": "bytes=1-3"})
	if resp.StatusCode != 206 || body != `"a"` {
		t.Errorf("config range: %d %q", resp.StatusCode, body)
	}
}

func TestCORS(t *testing.T) {
	_, srv, _ := setup(t)
	req, _ := http.NewRequest("OPTIONS", srv.URL+"/org/model/resolve/main/model.safetensors", nil)
	req.Header.Set("Origin", "http://page.test")
	req.Header.Set("Access-Control-Request-Headers", "range, authorization")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "http://page.test" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Authorization") || !strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Range") {
		t.Fatalf("preflight %d %v", resp.StatusCode, resp.Header)
	}
	r2, _ := get(t, srv.URL+"/org/model/resolve/main/model.safetensors", map[string]string{"Origin": "http://page.test"})
	exp := r2.Header.Get("Access-Control-Expose-Headers")
	for _, h := range []string{"Content-Range", "Content-Length", "ETag", "X-Linked-Size", "X-Repo-Commit", "X-Error-Code", "X-Error-Message"} {
		if !strings.Contains(exp, h) {
			t.Errorf("Expose-Headers lacks %s: %q", h, exp)
		}
	}
}

// With AllowOrigin, only the origins it lets in get a CORS answer (the
// browser keeps the bytes from any other page); a request with no Origin is
// answered as before.
func TestCORSAllowOrigin(t *testing.T) {
	root, _, _ := setup(t)
	s, err := New(root, Options{AllowOrigin: func(o string) bool { return o == "http://127.0.0.1:9000" }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	u := srv.URL + "/org/model/resolve/main/config.json"
	for origin, want := range map[string]string{"http://127.0.0.1:9000": "http://127.0.0.1:9000", "https://evil.example": "", "": "*"} {
		h := map[string]string{}
		if origin != "" {
			h["Origin"] = origin
		}
		resp, body := get(t, u, h)
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != want || resp.StatusCode != 200 || body != `{"a":1}` {
			t.Errorf("Origin %q: %d, Access-Control-Allow-Origin %q, want %q", origin, resp.StatusCode, got, want)
		}
	}
}

func TestListing(t *testing.T) {
	_, srv, _ := setup(t)
	var all []map[string]any
	next := srv.URL + "/api/models/org/model/tree/main?recursive=true"
	pages := 0
	for next != "" {
		resp, body := get(t, next, nil)
		var page []map[string]any
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		pages++
		next = ""
		if l := resp.Header.Get("Link"); l != "" {
			next = srv.URL + strings.TrimSuffix(strings.TrimPrefix(strings.Split(l, ";")[0], "<"), ">")
		}
	}
	var files []string
	for _, e := range all {
		if e["type"] == "file" {
			files = append(files, e["path"].(string))
			if e["path"] == "model.safetensors" && e["lfs"].(map[string]any)["size"].(float64) != 1000 {
				t.Errorf("lfs size %v", e["lfs"])
			}
		}
	}
	if pages < 2 || strings.Join(files, ",") != "alias.json,config.json,model.safetensors,sub/x.txt" {
		t.Fatalf("%d pages, files %v", pages, files)
	}
	_, body := get(t, srv.URL+"/api/models/org/model", nil)
	if !strings.Contains(body, `"siblings"`) || !strings.Contains(body, `"rfilename":"model.safetensors"`) || strings.Contains(body, "hidden") || strings.Contains(body, "escape") {
		t.Fatalf("model info %s", body)
	}
}

func TestNoEscape(t *testing.T) {
	_, srv, _ := setup(t)
	for _, p := range []string{
		"/org/model/resolve/main/../../../etc/passwd",
		"/org/model/resolve/main/%2e%2e/%2e%2e/x",
		"/org/model/resolve/main/sub%2Fx.txt",
		"/org/model/resolve/main/escape.txt",
		"/org/model/resolve/main/.hidden",
		"/org/model/resolve/main/" + GatedFile,
		"/org/..%2Fmodel/resolve/main/config.json",
		"/cdn/org/model/main/..%5c..%5cx",
		"/api/models/../org/model",
		"/nope/model/resolve/main/config.json",
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, "GET "+p+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		b, _ := io.ReadAll(conn)
		conn.Close()
		status := strings.SplitN(string(b), " ", 3)
		if len(status) < 2 || (status[1] != "400" && status[1] != "404") || strings.Contains(string(b), "secret") {
			t.Errorf("%s: %.80q", p, string(b))
		}
	}
	// A symlink inside the repo to a file inside the repo is served.
	resp, body := get(t, srv.URL+"/org/model/resolve/main/alias.json", nil)
	if resp.StatusCode != 200 || body != `{"a":1}` {
		t.Errorf("inner symlink: %d %q", resp.StatusCode, body)
	}
}

func TestGated(t *testing.T) {
	root, srv, _ := setup(t)
	os.WriteFile(filepath.Join(root, "org", "model", GatedFile), []byte("tok1\ntok2\n"), 0o644)
	for _, u := range []string{"/api/models/org/model", "/api/models/org/model/tree/main", "/org/model/resolve/main/config.json"} {
		if resp, _ := get(t, srv.URL+u, nil); resp.StatusCode != 401 {
			t.Errorf("%s without token: %d", u, resp.StatusCode)
		}
		if resp, _ := get(t, srv.URL+u, map[string]string{"Authorization": "Bearer tok2"}); resp.StatusCode != 200 {
			t.Errorf("%s with token: %d", u, resp.StatusCode)
		}
	}
}

// It reads only what a request asks for: a range of a 64 GiB sparse file
// answers at once with just those bytes.
func TestReadsOnlyTheRange(t *testing.T) {
	root, srv, s := setup(t)
	f, err := os.Create(filepath.Join(root, "org", "model", "huge.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 30); err != nil {
		t.Skip("no sparse files here:", err)
	}
	f.Close()
	s.ResetStats()
	resp, body := get(t, srv.URL+"/cdn/org/model/main/huge.safetensors", map[string]string{"Range": "bytes=34359738368-34359738375"})
	if resp.StatusCode != 206 || len(body) != 8 {
		t.Fatalf("%d %d", resp.StatusCode, len(body))
	}
	if _, n := s.Stats(); n != 8 {
		t.Fatalf("wrote %d body bytes", n)
	}
}
