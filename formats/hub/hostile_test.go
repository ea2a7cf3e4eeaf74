package hub

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hostile serves one .safetensors URL by handler and reads its first
// bytes as a load does (the first read comes with opening it); cancel, when
// set, is called with the read's cancel function before it starts.
func hostile(t *testing.T, h http.HandlerFunc, cancel func(context.CancelFunc), opts ...Option) error {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := NewClient(append([]Option{WithRetries(1), WithBackoff(time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	if cancel != nil {
		cancel(stop)
	}
	r, _, err := c.OpenURL(ctx, srv.URL+"/m.safetensors").Open(ctx, "m.safetensors")
	if err != nil {
		return err
	}
	_, err = r.ReadAt(make([]byte, 8), 0)
	return err
}

// Bytes sent with a Content-Encoding are not the file's bytes: refused,
// naming the encoding, instead of read as the header.
func TestEncodedRangeRefused(t *testing.T) {
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	w.Write(make([]byte, 64))
	w.Close()
	err := hostile(t, func(w http.ResponseWriter, q *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Range", "bytes 0-63/64")
		w.WriteHeader(206)
		w.Write(z.Bytes())
	}, nil)
	if err == nil || !strings.Contains(err.Error(), `Content-Encoding "gzip"`) {
		t.Errorf("a gzip-encoded range: %v", err)
	}
}

// A read cancelled while the body trickles in says it was cancelled.
func TestCancelledBodySaysSo(t *testing.T) {
	err := hostile(t, func(w http.ResponseWriter, q *http.Request) {
		w.Header().Set("Content-Range", "bytes 0-99999/100000")
		w.Header().Set("Content-Length", "100000")
		w.WriteHeader(206)
		for range 50 {
			if _, err := w.Write([]byte{0}); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-time.After(100 * time.Millisecond):
			case <-q.Context().Done():
				return
			}
		}
	}, func(cancel context.CancelFunc) { time.AfterFunc(300*time.Millisecond, cancel) })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled read: %v, want context.Canceled", err)
	}
}

// A Retry-After longer than a request waits for ends the request at once,
// with the server's wait in the message (it was waited out in minutes of
// pieces, per retry).
func TestFarRetryAfter(t *testing.T) {
	start := time.Now()
	err := hostile(t, func(w http.ResponseWriter, q *http.Request) {
		w.Header().Set("Retry-After", "315360000")
		w.WriteHeader(503)
	}, nil, WithRetries(4))
	if err == nil || !strings.Contains(err.Error(), "retry after") || time.Since(start) > 20*time.Second {
		t.Errorf("a 10-year Retry-After: %v after %v", err, time.Since(start))
	}
}

// tokenFetcher answers the first request with a redirect to loc and
// records the Authorization of every request.
type tokenFetcher struct {
	loc  string
	auth []string
}

func (f *tokenFetcher) Fetch(ctx context.Context, r Request) (*Response, error) {
	f.auth = append(f.auth, r.Header["Authorization"])
	if len(f.auth) == 1 {
		return &Response{Status: 302, Header: map[string]string{"location": f.loc}, Body: io.NopCloser(strings.NewReader("")), URL: r.URL}, nil
	}
	return &Response{Status: 404, Header: map[string]string{}, Body: io.NopCloser(strings.NewReader("")), URL: r.URL}, nil
}

// The token is not sent over a redirect from https down to http on the
// same host.
func TestTokenNotSentInClear(t *testing.T) {
	f := &tokenFetcher{loc: "http://hub.example/x.safetensors"}
	c, err := NewClient(WithEndpoint("https://hub.example"), WithToken("hf_secret"), WithFetcher(f), WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	c.roundTrip(context.Background(), "https://hub.example/org/m/resolve/main/x.safetensors", "bytes=0-7")
	if len(f.auth) != 2 || f.auth[0] != "Bearer hf_secret" || f.auth[1] != "" {
		t.Errorf("Authorization on the https request, then the http one: %q", f.auth)
	}
}

// A small file from a server that ignores Range and states no length is
// read whole: the body's end is the file's (it was retried as a short body
// and then failed).
func TestWholeFileOfNoStatedLength(t *testing.T) {
	file := append([]byte{16, 0, 0, 0, 0, 0, 0, 0}, []byte(`{"__metadata__":{}}`+"\x20")...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		w.(http.Flusher).Flush() // chunked: no Content-Length
		w.Write(file)
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(WithRetries(1), WithBackoff(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, size, err := c.OpenURL(ctx, srv.URL+"/m.safetensors").Open(ctx, "m.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(file))
	if n, err := r.ReadAt(got, 0); err != nil || n != len(file) || !bytes.Equal(got, file) {
		t.Errorf("read %d bytes, %v (size %d)", n, err, size)
	}
}

// A listing whose size disagrees with the bytes' server is named as the
// one that said otherwise.
func TestListingSizeDisagrees(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		w.Header().Set("Content-Range", "bytes 0-7/136")
		w.WriteHeader(206)
		w.Write(make([]byte, 8))
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	f := c.NewRemoteFile(context.Background(), srv.URL+"/m.safetensors", "m.safetensors", 50)
	_, err = f.ReadAt(make([]byte, 8), 0)
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "says 136 bytes, the repo's listing said 50") {
		t.Errorf("%v", err)
	}
}

// The hub answers 401 alike for a repo that does not exist and for a
// private or gated one read without a token; its X-Error-Code and
// X-Error-Message tell the cases apart where they can, and the error says
// what a person can do about each.
func TestAccessErrors(t *testing.T) {
	for _, c := range []struct {
		status      int
		code, msg   string
		token, want string
	}{
		{401, "", "", "", "repository not found: check ORG/NAME, or, if it is private or gated, give a token"},
		{401, "RepoNotFound", "Repository not found", "hf_x", "repository not found, or private or gated and the token given cannot read it"},
		{401, "", "Invalid credentials in Authorization header", "hf_bad", "the token was refused (invalid credentials)"},
		{401, "GatedRepo", "Access to model org/name is restricted.", "", "the repo is gated: request access on its page"},
		{403, "GatedRepo", "", "hf_x", "the repo is gated: request access"},
		{403, "", "", "hf_x", "forbidden: the token given has no access"},
	} {
		err := hostile(t, func(w http.ResponseWriter, r *http.Request) {
			if c.code != "" {
				w.Header().Set("X-Error-Code", c.code)
			}
			if c.msg != "" {
				w.Header().Set("X-Error-Message", c.msg)
			}
			w.WriteHeader(c.status)
		}, nil, WithToken(c.token))
		var he *HTTPError
		if !errors.As(err, &he) || he.Status != c.status || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d %q %q: %v, want %q", c.status, c.code, c.msg, err, c.want)
		}
		if c.token != "" && strings.Contains(err.Error(), c.token) {
			t.Errorf("the error shows the token: %v", err)
		}
	}
}

// The timeout bounds a request's lack of progress, not its length: a body
// that keeps coming, slower than the timeout in all, is read whole; one
// that stops for longer than the timeout is cut off and said so.
func TestTimeoutIsProgress(t *testing.T) {
	trickle := func(pause time.Duration, at int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			const n = 64 << 10
			w.Header().Set("Content-Length", strconv.Itoa(n))
			w.WriteHeader(200)
			chunk := make([]byte, n/16)
			for i := range 16 {
				d := 15 * time.Millisecond
				if i == at {
					d = pause
				}
				time.Sleep(d)
				w.Write(chunk)
				w.(http.Flusher).Flush()
			}
		}
	}
	start := time.Now()
	if err := hostile(t, trickle(15*time.Millisecond, -1), nil, WithTimeout(100*time.Millisecond)); err != nil {
		t.Fatalf("a body arriving for %v, steadily, with a 100 ms timeout: %v", time.Since(start), err)
	}
	err := hostile(t, trickle(400*time.Millisecond, 8), nil, WithTimeout(100*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "no progress within 100ms") {
		t.Fatalf("a body that stalls 400 ms: %v", err)
	}
	// a timeout, not a cancel: the page and the jobs tell the user's cancel
	// apart by context.Canceled
	if errors.Is(err, context.Canceled) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a stall reads as a cancel: %v", err)
	}
}

// A read larger than a file's cache (a whole tensor, decoded) is not kept
// in it: kept, the bytes would be held twice, by the cache and by the
// caller's copy.
func TestLargeReadNotCached(t *testing.T) {
	const n = cacheLimit + 1<<20
	data := make([]byte, n)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "m.safetensors", time.Time{}, bytes.NewReader(data))
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient()
	if err != nil {
		t.Fatal(err)
	}
	ra, _, err := c.OpenURL(context.Background(), srv.URL+"/m.safetensors").Open(context.Background(), "m.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	f := ra.(*RemoteFile)
	if _, err := f.ReadAt(make([]byte, n-100), 50); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	cached := f.cached
	f.mu.Unlock()
	if cached > cacheLimit {
		t.Fatalf("%d bytes cached after a %d-byte read, over the %d limit", cached, n-100, cacheLimit)
	}
}

// A server that ignores Range answers every read with the whole file: a
// read near its start skips there, one past maxSkip is refused at once,
// naming the cause, instead of downloading everything before it.
func TestServerIgnoringRange(t *testing.T) {
	const size = maxSkip + 32<<20
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.WriteHeader(200)
		n, _ := io.Copy(w, io.LimitReader(zeros{}, size))
		sent.Add(n)
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	ra, _, err := c.OpenURL(context.Background(), srv.URL+"/m.safetensors").Open(context.Background(), "m.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ra.ReadAt(make([]byte, 100), 1000); err != nil {
		t.Fatalf("a read near the start of a full-body answer: %v", err)
	}
	_, err = ra.ReadAt(make([]byte, 100), size-1000)
	if err == nil || !strings.Contains(err.Error(), "ignores Range") {
		t.Fatalf("a read past %d MiB of a full-body answer: %v", maxSkip>>20, err)
	}
	srv.CloseClientConnections()
	if s := sent.Load(); s > size/2 {
		t.Errorf("%d bytes sent for the refused read", s)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// A 429 without Retry-After waits for the hub's RateLimit window to reset
// (t=N: N+1 seconds, as huggingface_hub waits); 408 is temporary too.
func TestRateLimitHeader(t *testing.T) {
	c, err := NewClient()
	if err != nil {
		t.Fatal(err)
	}
	for h, want := range map[string]time.Duration{`"api";r=0;t=12`: 13 * time.Second, `"resolvers";r=3; t=0`: time.Second, "junk": 0, "": 0} {
		e := c.statusError("https://huggingface.co/x", &Response{Status: 429, Header: map[string]string{"ratelimit": h}, Body: io.NopCloser(strings.NewReader(""))})
		if e.RetryAfter != want || !e.Temporary() {
			t.Errorf("RateLimit %q: wait %v, want %v", h, e.RetryAfter, want)
		}
	}
	e := c.statusError("https://huggingface.co/x", &Response{Status: 429, Header: map[string]string{"ratelimit": `"api";r=0;t=12`, "retry-after": "3"}, Body: io.NopCloser(strings.NewReader(""))})
	if e.RetryAfter != 3*time.Second {
		t.Errorf("Retry-After and RateLimit: wait %v, want Retry-After's 3s", e.RetryAfter)
	}
	if e := (&HTTPError{Status: 408}); !e.Temporary() {
		t.Error("408 is not retried")
	}
}

// A body that breaks off is resumed where it stopped, when the retry's
// answer carries the same validator: the retry asks for the rest only, and
// the bytes read are the file's. With another validator the file changed
// between the two answers (ErrChanged); with none to compare, the retry
// starts over.
func TestResumeBrokenBody(t *testing.T) {
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i*7 + i>>9)
	}
	const cut = 300 << 10
	for _, c := range []struct {
		name          string
		first, second string // the two answers' ETags
		resumed       bool
		changed       bool
	}{
		{"same etag", `"v1"`, `"v1"`, true, false},
		{"etag changed", `"v1"`, `"v2"`, false, true},
		{"no etag", "", "", false, false},
		{"weak etag", `W/"v1"`, `W/"v1"`, false, false}, // promises no byte-for-byte sameness
	} {
		var mu sync.Mutex
		var starts []int64
		broken := false
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start, end, ok := parseRangeHeader(r.Header.Get("Range"))
			if !ok || end-start < 1<<18 { // the client's small probes (the 100,000-byte first read): answered whole
				if c.first != "" {
					w.Header().Set("ETag", c.first)
				}
				http.ServeContent(w, r, "m.safetensors", time.Time{}, bytes.NewReader(data))
				return
			}
			mu.Lock()
			starts = append(starts, start)
			first := !broken
			broken = true
			mu.Unlock()
			tag := c.second
			if first {
				tag = c.first
			}
			if tag != "" {
				w.Header().Set("ETag", tag)
			}
			end = min(end, int64(len(data))-1)
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end, len(data)))
			w.Header().Set("Content-Length", strconv.FormatInt(end-start+1, 10))
			w.WriteHeader(206)
			if first {
				w.Write(data[start : start+cut])
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler) // the connection drops mid-body
			}
			w.Write(data[start : end+1])
		}))
		got, err := readRetried(t, srv.URL+"/m.safetensors", 100, 900<<10)
		srv.Close()
		if c.changed {
			if !errors.Is(err, ErrChanged) {
				t.Errorf("%s: %v, want ErrChanged", c.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !bytes.Equal(got, data[100:100+len(got)]) {
			t.Fatalf("%s: the bytes read are not the file's", c.name)
		}
		if len(starts) != 2 {
			t.Fatalf("%s: %d large requests (%v), want the broken one and its retry", c.name, len(starts), starts)
		}
		want := starts[0]
		if c.resumed {
			want += cut
		}
		if starts[1] != want {
			t.Errorf("%s: the retry asked from byte %d, want %d", c.name, starts[1], want)
		}
	}
}

// parseRangeHeader reads "bytes=a-b".
func parseRangeHeader(v string) (start, end int64, ok bool) {
	r, found := strings.CutPrefix(v, "bytes=")
	a, b, found2 := strings.Cut(r, "-")
	if !found || !found2 {
		return 0, 0, false
	}
	s, err1 := strconv.ParseInt(a, 10, 64)
	e, err2 := strconv.ParseInt(b, 10, 64)
	return s, e, err1 == nil && err2 == nil
}

// A 429 with a time to wait holds back every request to the hub, not only
// the one told: a read started during the pause reaches the server only
// after it.
func TestRateLimitPausesEveryRequest(t *testing.T) {
	data := make([]byte, 4096)
	var mu sync.Mutex
	limited := false
	var told time.Time
	arrived := map[string]time.Time{}
	saw429 := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		first := !limited && r.URL.Path == "/a.safetensors"
		if first {
			limited, told = true, time.Now()
		} else if _, seen := arrived[r.URL.Path]; !seen {
			arrived[r.URL.Path] = time.Now()
		}
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(429)
			close(saw429)
			return
		}
		http.ServeContent(w, r, "x.safetensors", time.Time{}, bytes.NewReader(data))
	}))
	defer srv.Close()
	c, err := NewClient(WithEndpoint(srv.URL), WithRetries(2), WithBackoff(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	read := func(name string) error {
		ra, _, err := c.OpenURL(ctx, srv.URL+"/"+name).Open(ctx, name)
		if err != nil {
			return err
		}
		_, err = ra.ReadAt(make([]byte, 8), 0)
		return err
	}
	errA := make(chan error, 1)
	go func() { errA <- read("a.safetensors") }()
	<-saw429
	for start := time.Now(); ; { // until the client has read the 429 (a request sent before that is on its way)
		c.pauseMu.Lock()
		set := !c.pauseUntil.IsZero()
		c.pauseMu.Unlock()
		if set {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the client set no pause after the hub's 429")
		}
		time.Sleep(time.Millisecond)
	}
	if err := read("b.safetensors"); err != nil {
		t.Fatal(err)
	}
	if err := <-errA; err != nil {
		t.Fatalf("the read told to wait: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if d := arrived["/b.safetensors"].Sub(told); d < 900*time.Millisecond {
		t.Errorf("a read started during the hub's 1 s pause reached it %v after the 429", d)
	}
}

// A resumed read of a server that ignores Range (every answer the whole
// file) still reads at its own start: the bytes kept do not push it past
// maxSkip, where a fresh read of the same range is allowed.
func TestResumeOnServerIgnoringRange(t *testing.T) {
	const size = maxSkip + 6<<20
	const at = maxSkip - 4<<20 // the read: within maxSkip
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Header().Set("ETag", `"v1"`)
		w.WriteHeader(200)
		n := int64(size)
		if r.Header.Get("Range") != "" && !strings.HasPrefix(r.Header.Get("Range"), "bytes=0-") && calls.Add(1) == 1 {
			n = at + 5<<20 // breaks off 5 MiB into the read, past maxSkip
		}
		io.CopyN(w, &pattern{}, n)
		if n < size {
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
	}))
	defer srv.Close()
	got, err := readRetried(t, srv.URL+"/m.safetensors", at, 6<<20)
	if err != nil {
		t.Fatalf("a read within maxSkip, broken off past it: %v", err)
	}
	for i, b := range got {
		if b != patternByte(at+int64(i)) {
			t.Fatalf("byte %d of the read is not the file's", i)
		}
	}
}

// pattern is an endless stream whose byte at offset i is patternByte(i).
type pattern struct{ off int64 }

func (p *pattern) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = patternByte(p.off + int64(i))
	}
	p.off += int64(len(b))
	return len(b), nil
}

func patternByte(i int64) byte { return byte(i*131 + i>>11) }

// A hub's JSON error body is shown as its words; a transport error names
// the URL once, redacted (Go's own text repeats it whole).
func TestErrorTexts(t *testing.T) {
	c, err := NewClient()
	if err != nil {
		t.Fatal(err)
	}
	e := c.statusError("https://huggingface.co/api/models/a/b", &Response{Status: 404, Header: map[string]string{}, Body: io.NopCloser(strings.NewReader(`{"error":"Repository not found"}`))})
	if !strings.HasSuffix(e.Error(), "not found: Repository not found") {
		t.Errorf("404 with a JSON body: %q", e.Error())
	}
	// A web server that is no hub answers with its HTML error page: said
	// so, without the markup.
	e = c.statusError("http://127.0.0.1:8000/api/models/a/b", &Response{Status: 404, Header: map[string]string{"content-type": "text/html; charset=utf-8"},
		Body: io.NopCloser(strings.NewReader("<!DOCTYPE HTML>\n<html><head><title>Error response</title></head><body><h1>Error response</h1></body></html>"))})
	if s := e.Error(); strings.Contains(s, "<") || !strings.Contains(s, "not found: the server answered with a web page, not the Hugging Face hub's API: is the endpoint a hub?") {
		t.Errorf("404 with an HTML page: %q", s)
	}
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close() // nothing listens there now
	c2, err := NewClient(WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c2.OpenURL(context.Background(), addr+"/m.safetensors?X-Amz-Signature=secret").Open(context.Background(), "m.safetensors")
	if err == nil {
		ra, _, _ := c2.OpenURL(context.Background(), addr+"/m.safetensors?X-Amz-Signature=secret").Open(context.Background(), "m.safetensors")
		_, err = ra.ReadAt(make([]byte, 8), 0)
	}
	if err == nil || strings.Count(err.Error(), addr) != 1 || strings.Contains(err.Error(), "secret") {
		t.Errorf("a refused connection: %v", err)
	}
}

// readRetried reads n bytes at off of the file at u through a client that
// retries twice, quickly.
func readRetried(t *testing.T, u string, off int64, n int) ([]byte, error) {
	t.Helper()
	c, err := NewClient(WithRetries(2), WithBackoff(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ra, _, err := c.OpenURL(ctx, u).Open(ctx, path.Base(u))
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	_, err = ra.ReadAt(got, off)
	return got, err
}
