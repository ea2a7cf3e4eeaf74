//go:build !js

package hub

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strings"
)

// NetFetcher is a Fetcher over net/http that hands redirects back to the client.
type NetFetcher struct {
	Client *http.Client
}

// NewNetFetcher returns a NetFetcher with its own transport.
func NewNetFetcher() *NetFetcher {
	return &NetFetcher{Client: &http.Client{
		Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			MaxIdleConnsPerHost: 64,
			ForceAttemptHTTP2:   true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Fetch sends the GET.
func (f *NetFetcher) Fetch(ctx context.Context, r Request) (*Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL, nil)
	if err != nil {
		return nil, err
	}
	if r.Range != "" {
		req.Header.Set("Range", r.Range)
	}
	for k, v := range r.Header {
		req.Header.Set(k, v)
	}
	resp, err := f.Client.Do(req)
	if err != nil {
		if sameOnEveryTry(err) {
			return nil, &permanentError{err}
		}
		return nil, err
	}
	h := make(map[string]string, len(resp.Header))
	for k, v := range resp.Header {
		h[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	return &Response{Status: resp.StatusCode, Header: h, Body: resp.Body, URL: r.URL}, nil
}

// sameOnEveryTry tells the network errors that a retry cannot change: the
// server's certificate is not trusted (an unknown authority, another host's
// name, expired), or the host's name does not exist. Retrying them only
// delays the message by the backoff's seconds. (Where the system resolver
// answers "no such host" while the network is briefly down, as macOS's may,
// that read fails at once too; running it again is the remedy.)
func sameOnEveryTry(err error) bool {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	var dns *net.DNSError
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) ||
		(errors.As(err, &dns) && dns.IsNotFound)
}
