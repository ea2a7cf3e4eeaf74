package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/gorilla/websocket"

	"github.com/quantscope/quantscope/companion/jobs"
	"github.com/quantscope/quantscope/companion/ops"
	"github.com/quantscope/quantscope/companion/proto"
	"github.com/quantscope/quantscope/formats/checkpoint"
	"github.com/quantscope/quantscope/formats/hub"
)

// companion is the websocket side of `quantscope serve`: /ws?token=T, behind
// the loopback Host check every request passes (serve.go's loopbackHost).
type companion struct {
	token   string          // per launch, from crypto/rand
	origins map[string]bool // --allow-origin, normalised scheme://host[:port]
	jobs    *jobs.Manager
	ctx     context.Context // the server's: its end closes every connection
	up      websocket.Upgrader
}

// companionFlags are serve's companion options.
type companionFlags struct {
	origins                 []string
	maxJobs, maxJobsPerConn int
	outDir                  string // `--out-dir`: the only folder jobs may write files under
	inDir                   string // `--in-dir`: the only folder jobs may read local files under
}

func newToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// normOrigin reads an origin as a browser sends it: scheme://host[:port],
// lowercase, nothing after.
func normOrigin(s string) (string, error) {
	u, err := url.Parse(strings.TrimRight(s, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil {
		return "", fmt.Errorf("--allow-origin %q: want scheme://host[:port], as a browser's Origin header reads", s)
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}

// hubOrigins is the local hub's CORS rule under serve and hub: a page on
// any loopback origin (this server's own, another local server's) or one of
// allowed (--allow-origin, normalised) may read it; a site elsewhere may
// not, since the folder served is this machine's, not a public hub's.
func hubOrigins(allowed map[string]bool) func(string) bool {
	return func(o string) bool {
		n, err := normOrigin(o)
		if err != nil {
			return false
		}
		if allowed[n] {
			return true
		}
		u, err := url.Parse(n)
		return err == nil && isLoopbackName(u.Hostname())
	}
}

// parseOrigins normalises --allow-origin values.
func parseOrigins(list []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, o := range list {
		n, err := normOrigin(o)
		if err != nil {
			return nil, &usageError{msg: err.Error()}
		}
		out[n] = true
	}
	return out, nil
}

func newCompanion(ctx context.Context, cf companionFlags) (*companion, error) {
	tok, err := newToken()
	if err != nil {
		return nil, err
	}
	origins, err := parseOrigins(cf.origins)
	if err != nil {
		return nil, err
	}
	c := &companion{token: tok, origins: origins, ctx: ctx}
	for _, d := range []struct {
		flag string
		dir  *string
	}{{"--out-dir", &cf.outDir}, {"--in-dir", &cf.inDir}} {
		if *d.dir == "" {
			continue
		}
		abs, err := filepath.Abs(*d.dir)
		if err != nil {
			return nil, err
		}
		if st, err := os.Stat(abs); err != nil || !st.IsDir() {
			return nil, &usageError{msg: fmt.Sprintf("%s %s: not a folder", d.flag, *d.dir)}
		}
		*d.dir = abs
	}
	backend, gpus := chooseBackend(ctx)
	c.jobs = jobs.New(jobs.Options{
		WriteDir: cf.outDir,
		ReadDir:  cf.inDir,
		Backend:  backend,
		Load: func(ctx context.Context, s proto.Submit, progress func(checkpoint.Progress)) (*checkpoint.Checkpoint, error) {
			return loadSubmit(ctx, s, cf.inDir, progress)
		},
		MaxJobs:      cf.maxJobsPerConn,
		MaxJobsTotal: cf.maxJobs,
		Hello: proto.Hello{Program: programVersion(), Backends: []string{backend.Name()}, CPUCores: runtime.NumCPU(),
			GPUs: gpus, LocalFiles: cf.inDir != ""},
	})
	c.up = websocket.Upgrader{
		CheckOrigin: func(*http.Request) bool { return true }, // checked before the upgrade, with our own rules
	}
	return c, nil
}

// loadSubmit reads the checkpoint a job names: a repo from this machine's
// Hugging Face cache or the hub, as the command line would, or a local
// folder or file under inDir (`serve --in-dir`), named relative to it. Unlike
// the command line's, a job's local path is never the companion's working
// folder's or an absolute one: a client must not read the user's files
// beyond the folder the user chose (ops.LocalReads).
func loadSubmit(ctx context.Context, s proto.Submit, inDir string, progress func(checkpoint.Progress)) (*checkpoint.Checkpoint, error) {
	sf := sourceFlags{endpoint: s.Endpoint, revision: s.Revision, token: s.HubToken, fromClient: true}
	var src hub.Source
	var err error
	if local, lerr := jobLocalPath(s.Source, inDir); lerr != nil {
		return nil, lerr
	} else if local != "" {
		src, err = hub.OpenLocal(local)
	} else {
		src, err = resolveRemote(ctx, s.Source, sf)
	}
	if err != nil {
		return nil, err
	}
	return loadFrom(ctx, src, checkpoint.Options{Progress: progress})
}

// jobLocalPath is the local path a job's SOURCE names under inDir, "" when
// it names a repo instead, or an error with rule in-dir when it can only be
// a local path and is not one under inDir.
func jobLocalPath(source, inDir string) (string, error) {
	if strings.Contains(source, "://") {
		return "", nil
	}
	if inDir != "" && filepath.IsLocal(source) {
		p := filepath.Join(inDir, source)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if !looksLocal(source) {
		return "", nil // ORG/NAME[@REV]: the cache or the hub
	}
	reads := ops.LocalReads{Confined: true, Dir: inDir}
	p, err := reads.Path("source", "SOURCE", source)
	if err != nil {
		return "", err
	}
	return "", fmt.Errorf("source: no such file or directory under the companion's input folder: %s", p)
}

func programVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// originOK: no Origin (not a browser; the token still applies), one of this
// server's own loopback origins, or one given with --allow-origin.
func (c *companion) originOK(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	n, err := normOrigin(o)
	if err != nil {
		return false
	}
	if c.origins[n] {
		return true
	}
	u, _ := url.Parse(n)
	if u.Scheme != "http" {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	// The page may be open on another loopback name of this same server.
	oh, op, err1 := net.SplitHostPort(u.Host)
	_, rp, err2 := net.SplitHostPort(r.Host)
	return err1 == nil && err2 == nil && op == rp && isLoopbackName(oh) && isLoopbackName(hostOnly(r.Host))
}

func hostOnly(hostport string) string {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport
	}
	return h
}

func isLoopbackName(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(h, "[]"))
	return ip != nil && ip.IsLoopback()
}

func (c *companion) serveWS(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if !c.originOK(r) {
		http.Error(w, "quantscope: Origin "+strconv.Quote(r.Header.Get("Origin"))+" may not use this companion; start it with --allow-origin "+r.Header.Get("Origin")+" to allow it", http.StatusForbidden)
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.URL.Query().Get("token")), []byte(c.token)) != 1 {
		http.Error(w, "quantscope: missing or wrong token; use the URL `quantscope serve` printed", http.StatusUnauthorized)
		return
	}
	ws, err := c.up.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered already
	}
	c.jobs.Serve(c.ctx, ws)
}

// announce prints, once the server listens, the URL to open (with the token)
// and the websocket's.
func (c *companion) announce(addr net.Addr, stdout, stderr interface{ Write([]byte) (int, error) }) {
	tcp, _ := addr.(*net.TCPAddr)
	host := addr.String()
	if tcp != nil && !tcp.IP.IsLoopback() {
		fmt.Fprintf(stderr, "warning: listening on %s, not loopback: other machines can reach this server (the websocket still needs the token)\n", addr)
		if tcp.IP.IsUnspecified() {
			host = net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp.Port))
		}
	}
	fmt.Fprintf(stdout, "open http://%s/?token=%s\n", host, c.token)
	fmt.Fprintf(stdout, "companion websocket: ws://%s/ws?token=%s\n", host, c.token)
}
