//go:build !js

package hub

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A server whose certificate this machine does not trust is asked once:
// the same handshake fails the same way on every retry (it was retried
// four times, with seconds of backoff, before the message came).
func TestUntrustedCertificateNotRetried(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c, err := NewClient(WithRetries(4), WithBackoff(50*time.Millisecond)) // the system's roots, not the test server's
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _, err = c.OpenURL(ctx, srv.URL+"/m.safetensors").Open(ctx, "m.safetensors")
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("an untrusted certificate: %v", err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections to a server with an untrusted certificate, want 1 (no retry)", n)
	}
}

// A name that does not exist is not retried; a failed lookup that may pass
// (a timeout, no answer) is.
func TestSameOnEveryTry(t *testing.T) {
	wrap := func(e error) error { return &url.Error{Op: "Get", URL: "https://x.example/", Err: e} }
	for _, c := range []struct {
		err  error
		same bool
	}{
		{wrap(&net.DNSError{Err: "no such host", Name: "x.example", IsNotFound: true}), true},
		{wrap(&net.DNSError{Err: "i/o timeout", Name: "x.example", IsTimeout: true}), false},
		{wrap(&net.OpError{Op: "dial", Err: errors.New("connection refused")}), false},
		{wrap(errors.New("EOF")), false},
	} {
		if got := sameOnEveryTry(c.err); got != c.same {
			t.Errorf("%v: sameOnEveryTry %v, want %v", c.err, got, c.same)
		}
	}
}
