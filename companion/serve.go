package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/quantscope/quantscope/companion/localhub"
)

func cmdHub(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hub", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8090", "listen address")
	latency := fs.Duration("latency", 0, "added to every response (for benchmarks)")
	cdnAddr := fs.String("cdn-addr", "", "also serve the CDN on this address and redirect LFS files there: another origin, as the real hub's CDN is")
	var allow []string
	fs.Func("allow-origin", "a page `URL` (scheme://host[:port]) off this machine that may read the hub; repeatable (pages on loopback origins always may)", func(s string) error {
		allow = append(allow, s)
		return nil
	})
	pos, err := parseFlags(fs, args, 1, "DIR")
	if err != nil {
		return err
	}
	if *latency < 0 {
		return &usageError{msg: fmt.Sprintf("hub: --latency %v: want a duration of 0 or more", *latency)}
	}
	if fi, err := os.Stat(pos[0]); err != nil || !fi.IsDir() {
		return fmt.Errorf("hub: %s is not a folder (the hub serves a folder of ORG/NAME repo folders)", pos[0])
	}
	origins, err := parseOrigins(allow)
	if err != nil {
		return err
	}
	opt := localhub.Options{Latency: *latency, AllowOrigin: hubOrigins(origins)}
	var cdnLn net.Listener
	if *cdnAddr != "" {
		if cdnLn, err = net.Listen("tcp", *cdnAddr); err != nil {
			return err
		}
		opt.CDN = "http://" + cdnLn.Addr().String()
	}
	h, err := localhub.New(pos[0], opt)
	if err != nil {
		return err
	}
	if cdnLn != nil {
		srv := &http.Server{Handler: loopbackHost(cdnLn.Addr(), h), ReadHeaderTimeout: 10 * time.Second}
		fmt.Fprintf(stdout, "its CDN at %s\n", opt.CDN)
		go srv.Serve(cdnLn)
		defer srv.Close()
	}
	return listenAndServe(ctx, *addr, h, stdout, fmt.Sprintf("hub of %s", pos[0]))
}

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	demo := fs.Bool("demo", false, "serve the generated demo repos from the local hub")
	hubDir := fs.String("hub", "", "serve the repos under DIR from the local hub")
	wasmDir := fs.String("wasm", "", "folder with quantscope.wasm and wasm_exec.js (default: beside the binary, else ./bin)")
	var cf companionFlags
	fs.Func("allow-origin", "a page `URL` (scheme://host[:port]) served elsewhere that may use this companion; repeatable", func(s string) error {
		cf.origins = append(cf.origins, s)
		return nil
	})
	fs.IntVar(&cf.maxJobs, "max-jobs", 8, "running companion jobs, across connections")
	fs.StringVar(&cf.outDir, "out-dir", "", "the only `DIR` under which jobs (the page's quantize…) may write files, at relative paths; without it they send the bytes back")
	fs.StringVar(&cf.inDir, "in-dir", "", "the only `DIR` under which jobs may read local files (a checkpoint as SOURCE, --data activations, eval files), at relative paths; without it they read repos from the hub or this machine's Hugging Face cache only")
	fs.IntVar(&cf.maxJobsPerConn, "max-jobs-per-conn", 4, "running companion jobs per websocket connection")
	if _, err := parseFlags(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	if *demo && *hubDir != "" {
		return &usageError{msg: "serve: --demo and --hub both name the local hub's folder; give one"}
	}
	dir := *hubDir
	if *demo {
		var err error
		if dir, err = demoCache(stdout); err != nil {
			return err
		}
	}
	comp, err := newCompanion(ctx, cf)
	if err != nil {
		return err
	}
	defer comp.jobs.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", comp.serveWS)
	what := "quantscope"
	info := map[string]any{"local_hub": dir != ""}
	if dir != "" {
		h, err := localhub.New(dir, localhub.Options{AllowOrigin: hubOrigins(comp.origins)})
		if err != nil {
			return err
		}
		mux.Handle("/", h) // everything the page does not claim is the hub's layout
		what += ", local hub of " + dir
	}
	if *demo {
		var demos []map[string]string
		for _, d := range demoRepos() {
			demos = append(demos, map[string]string{"id": d.id, "about": d.about})
		}
		info["demos"] = demos
		info["demo_token"] = demoToken
	}
	wdir, err := findWasm(*wasmDir)
	if err != nil {
		fmt.Fprintf(stderr, "warning: %v; the page will not load its engine until `make wasm` is run\n", err)
	}
	page := pageHandler(wdir)
	mux.Handle("GET /{$}", page)
	mux.Handle("GET /index.html", page)
	mux.Handle("GET /web/", page)
	mux.Handle("GET /wasm/", page)
	mux.HandleFunc("GET /quantscope/info", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(info)
	})
	fmt.Fprintf(stdout, "open the page at the address below")
	if dir != "" {
		fmt.Fprintf(stdout, "; or inspect from a terminal: quantscope inspect --endpoint http://%s ORG/NAME", *addr)
	}
	fmt.Fprintln(stdout)
	return listenAndServe(ctx, *addr, mux, stdout, what, func(a net.Addr) { comp.announce(a, stdout, stderr) })
}

// demoVersion names the generator's output; bump it when synth changes so
// that caches regenerate.
const demoVersion = "demo-v8"

// demoCache generates the demo repos once into the user's cache folder.
func demoCache(stdout io.Writer) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "quantscope", demoVersion)
	stamp := filepath.Join(dir, ".complete")
	if _, err := os.Stat(stamp); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir)+string(filepath.Separator), ".demo-")
	if err != nil {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return "", err
		}
		if tmp, err = os.MkdirTemp(filepath.Dir(dir), ".demo-"); err != nil {
			return "", err
		}
	}
	if err := writeDemos(tmp); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(demoVersion+"\n"), 0o644); err != nil {
		return "", err
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	fmt.Fprintf(stdout, "generated the demo repos in %s\n", dir)
	return dir, nil
}

func listenAndServe(ctx context.Context, addr string, h http.Handler, stdout io.Writer, what string, listening ...func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: loopbackHost(ln.Addr(), h), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "serving %s on http://%s\n", what, ln.Addr())
	for _, f := range listening {
		f(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return nil
	}
}

// loopbackHost refuses requests whose Host is not the loopback address the
// server listens on, when it listens on loopback: a web page elsewhere that
// rebinds its own name to 127.0.0.1 (DNS rebinding) cannot read the hub.
func loopbackHost(addr net.Addr, h http.Handler) http.Handler {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsLoopback() {
		return h // listening on a public address was asked for explicitly
	}
	port := strconv.Itoa(tcp.Port)
	allowed := map[string]bool{}
	for _, host := range []string{"127.0.0.1", "localhost", "[::1]", tcp.IP.String()} {
		allowed[host+":"+port] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed[r.Host] {
			http.Error(w, "quantscope: unexpected Host "+strconv.Quote(r.Host)+"; open the page by its loopback address", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}
