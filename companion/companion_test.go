package main

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/quantscope/quantscope/companion/proto"
)

// served is a running `quantscope serve` process.
type served struct {
	base, token string // http://127.0.0.1:PORT and the launch's token
	openLine    string // the URL line it printed
	mu          sync.Mutex
	stderr      bytes.Buffer
}

func (s *served) Stderr() string { s.mu.Lock(); defer s.mu.Unlock(); return s.stderr.String() }

type lockedWriter struct{ s *served }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.stderr.Write(p)
}

var openRE = regexp.MustCompile(`^open (http://[^/]+)/\?token=([0-9a-f]{48})$`)

// startServe runs `quantscope serve ARGS` and reads the URL it prints.
func startServe(t *testing.T, args ...string) *served {
	t.Helper()
	s := &served{}
	l := startProcess(t, append([]string{"serve"}, args...), lockedWriter{s}, 60*time.Second, openRE.MatchString)
	m := openRE.FindStringSubmatch(l)
	s.base, s.token, s.openLine = m[1], m[2], l
	return s
}

func wsURL(base, token string) string {
	return "ws" + strings.TrimPrefix(base, "http") + "/ws?token=" + token
}

// dialStatus tries the websocket and returns the HTTP status of a refused
// handshake (101 when it succeeds).
func dialStatus(t *testing.T, url string, hdr http.Header) int {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(url, hdr)
	if err == nil {
		ws.Close()
		return http.StatusSwitchingProtocols
	}
	if resp == nil {
		t.Fatalf("%s: %v", url, err)
	}
	return resp.StatusCode
}

// client is a real websocket client of the companion.
type client struct {
	t     *testing.T
	ws    *websocket.Conn
	in    chan received
	hello proto.Hello
}

type received struct {
	msg   proto.Message // nil for a binary frame
	frame proto.Frame
	at    time.Time
	err   error // the connection ended
}

func dialClient(t *testing.T, s *served) *client {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(wsURL(s.base, s.token), http.Header{"Origin": {s.base}})
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, ws: ws, in: make(chan received, 1024)}
	t.Cleanup(func() { ws.Close() })
	go func() {
		for {
			kind, b, err := ws.ReadMessage()
			now := time.Now()
			if err != nil {
				c.in <- received{err: err, at: now}
				close(c.in)
				return
			}
			if kind == websocket.BinaryMessage {
				f, err := proto.ParseFrame(b)
				c.in <- received{frame: f, err: err, at: now}
				continue
			}
			m, err := proto.Decode(b)
			if err != nil {
				t.Errorf("undecodable message %s: %v", b, err)
			}
			c.in <- received{msg: m, at: now}
		}
	}()
	r := c.next(10 * time.Second)
	h, ok := r.msg.(proto.Hello)
	if !ok {
		t.Fatalf("first message %#v, want hello", r)
	}
	c.hello = h
	return c
}

func (c *client) send(m proto.Message) time.Time {
	c.t.Helper()
	b, err := proto.Encode(m)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		c.t.Fatal(err)
	}
	return time.Now()
}

func (c *client) next(timeout time.Duration) received {
	c.t.Helper()
	select {
	case r, ok := <-c.in:
		if !ok {
			return received{err: errors.New("connection closed")}
		}
		return r
	case <-time.After(timeout):
		c.t.Fatalf("no message within %v", timeout)
	}
	return received{}
}

// until reads messages of job id until its result or error; it returns
// the progress messages seen and the final message.
func (c *client) until(id string, timeout time.Duration) (progress []proto.Progress, at []time.Time, final received) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := c.next(time.Until(deadline))
		if r.err != nil && r.msg == nil {
			c.t.Fatalf("job %s: connection ended: %v", id, r.err)
		}
		switch m := r.msg.(type) {
		case proto.Progress:
			if m.ID == id {
				progress = append(progress, m)
				at = append(at, r.at)
			}
		case proto.Result:
			if m.ID == id {
				return progress, at, r
			}
		case proto.Error:
			if m.ID == id {
				return progress, at, r
			}
		}
	}
}

// The security rules of the websocket, against the real server.
func TestCompanionSecurity(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	s := startServe(t, "--addr", "127.0.0.1:0", "--allow-origin", "http://page.example:9000")
	if !strings.HasPrefix(s.base, "http://127.0.0.1:") {
		t.Fatalf("bound %s, want 127.0.0.1 by default", s.base)
	}
	if w := s.Stderr(); strings.Contains(w, "warning: listening") {
		t.Errorf("loopback bind warned: %s", w)
	}
	port := strings.TrimPrefix(s.base, "http://127.0.0.1:")
	good := wsURL(s.base, s.token)
	for _, c := range []struct {
		what   string
		url    string
		header http.Header
		want   int
	}{
		{"own origin", good, http.Header{"Origin": {s.base}}, 101},
		{"own origin by localhost", good, http.Header{"Origin": {"http://localhost:" + port}}, 101},
		{"allowed origin", good, http.Header{"Origin": {"http://page.example:9000"}}, 101},
		{"no origin (not a browser)", good, nil, 101},
		{"cross-site origin", good, http.Header{"Origin": {"http://evil.example"}}, 403},
		{"allowed host, other port", good, http.Header{"Origin": {"http://page.example:9001"}}, 403},
		{"loopback origin on another port", good, http.Header{"Origin": {"http://127.0.0.1:1"}}, 403},
		{"https own host", good, http.Header{"Origin": {"https://127.0.0.1:" + port}}, 403},
		{"rebinding host", good, http.Header{"Host": {"evil.example:" + port}, "Origin": {"http://evil.example:" + port}}, 403},
		{"rebinding host without origin", good, http.Header{"Host": {"evil.example:" + port}}, 403},
		{"missing token", wsURL(s.base, "")[:len(wsURL(s.base, ""))-len("?token=")], nil, 401},
		{"empty token", wsURL(s.base, ""), nil, 401},
		{"wrong token", wsURL(s.base, strings.Repeat("0", 48)), nil, 401},
		{"token prefix", wsURL(s.base, s.token[:47]), nil, 401},
	} {
		if got := dialStatus(t, c.url, c.header); got != c.want {
			t.Errorf("%s: status %d, want %d", c.what, got, c.want)
		}
	}

	// A message past the read limit closes the connection.
	cl := dialClient(t, s)
	if cl.hello.Limits.MaxMessageBytes <= 0 || cl.hello.Protocol != proto.Version || cl.hello.LocalFiles {
		t.Fatalf("hello %+v (no --in-dir: local_files false)", cl.hello)
	}
	big := `{"type":"cancel","id":"` + strings.Repeat("x", int(cl.hello.Limits.MaxMessageBytes)) + `"}`
	cl.ws.WriteMessage(websocket.TextMessage, []byte(big))
	for {
		r := cl.next(10 * time.Second)
		if r.err != nil && r.msg == nil {
			if !websocket.IsCloseError(r.err, websocket.CloseMessageTooBig) {
				t.Errorf("an oversized message closed the connection with %v, want close code 1009", r.err)
			}
			break
		}
	}
	// The server still serves others.
	dialClient(t, s)

	// Each launch has its own token.
	t2 := startServe(t, "--addr", "127.0.0.1:0")
	if t2.token == s.token {
		t.Fatal("two launches printed the same token")
	}
	if got := dialStatus(t, wsURL(t2.base, s.token), nil); got != 401 {
		t.Errorf("another launch's token: %d", got)
	}
}

// Listening off loopback is allowed but warned about.
func TestCompanionPublicBindWarns(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	s := startServe(t, "--addr", "0.0.0.0:0")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(s.Stderr(), "not loopback") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(s.Stderr(), "not loopback") || !strings.Contains(s.Stderr(), "warning: listening on") {
		t.Fatalf("no warning on stderr: %q", s.Stderr())
	}
	if got := dialStatus(t, wsURL(s.base, "nope"), nil); got != 401 {
		t.Errorf("token not required off loopback: %d", got)
	}
}

func TestAllowOriginRefusesNonOrigins(t *testing.T) {
	for _, bad := range []string{"page.example", "ftp://x", "http://x/path", "http://x?q=1"} {
		_, stderr, code := runMain(t, "serve", "--addr", "127.0.0.1:0", "--allow-origin", bad)
		if code != 1 || !strings.Contains(stderr, "--allow-origin") {
			t.Errorf("%s: exit %d, %s", bad, code, stderr)
		}
	}
}

func TestOutDirMustBeAFolder(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, []byte("x"), 0o644)
	for _, bad := range []string{filepath.Join(t.TempDir(), "missing"), file} {
		_, stderr, code := runMain(t, "serve", "--addr", "127.0.0.1:0", "--out-dir", bad)
		if code != 1 || !strings.Contains(stderr, "--out-dir") || !strings.Contains(stderr, "not a folder") {
			t.Errorf("%s: exit %d, %s", bad, code, stderr)
		}
	}
}
