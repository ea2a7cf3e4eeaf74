package localhub

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// serveRange answers a GET with or without one Range, reading only the
// bytes it sends.
func (s *Server) serveRange(w http.ResponseWriter, r *http.Request, f entry, real string) {
	s.mu.Lock()
	s.perPath[f.path]++
	n := s.perPath[f.path]
	s.mu.Unlock()
	var fault Fault
	if s.opt.Faults != nil {
		fault = s.opt.Faults(r, f.path, n)
	}
	if fault.Status != 0 {
		if fault.RetryAfter != "" {
			w.Header().Set("Retry-After", fault.RetryAfter)
		}
		httpError(w, fault.Status, http.StatusText(fault.Status))
		return
	}
	h := w.Header()
	etag := etagOf(f)
	if fault.ETag != "" {
		etag = fault.ETag
	}
	h.Set("ETag", etag)
	h.Set("Accept-Ranges", "bytes")
	h.Set("Content-Type", "application/octet-stream")
	start, length, partial, err := parseRange(r.Header.Get("Range"), f.size)
	if fault.IgnoreRange {
		start, length, partial, err = 0, f.size, false, nil
	}
	if err != nil {
		h.Set("Content-Range", fmt.Sprintf("bytes */%d", f.size))
		httpError(w, http.StatusRequestedRangeNotSatisfiable, err.Error())
		return
	}
	file, err := os.Open(real)
	if err != nil {
		httpError(w, http.StatusInternalServerError, "cannot open")
		return
	}
	defer file.Close()
	h.Set("Content-Length", strconv.FormatInt(length, 10))
	if partial {
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, start+length-1, f.size))
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.WriteHeader(http.StatusOK)
	}
	if r.Method == http.MethodHead {
		return
	}
	if fault.SlowBody > 0 {
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		select {
		case <-time.After(fault.SlowBody):
		case <-r.Context().Done():
			return
		}
	}
	body := io.NewSectionReader(file, start, length)
	if fault.ResetAfter > 0 && fault.ResetAfter < length {
		io.CopyN(w, body, fault.ResetAfter)
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		if hj, ok := unwrapHijacker(w); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
			}
		}
		return
	}
	io.Copy(w, body)
}

func unwrapHijacker(w http.ResponseWriter) (http.Hijacker, bool) {
	for {
		if hj, ok := w.(http.Hijacker); ok {
			return hj, true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil, false
		}
		w = u.Unwrap()
	}
}

// parseRange reads one "bytes=a-b", "bytes=a-" or "bytes=-n" range. An
// empty header is the whole file; several ranges are answered whole, as the
// hub's CDN does.
func parseRange(v string, size int64) (start, length int64, partial bool, err error) {
	if v == "" {
		return 0, size, false, nil
	}
	spec, ok := strings.CutPrefix(v, "bytes=")
	if !ok {
		return 0, 0, false, fmt.Errorf("unsupported range unit in %q", v)
	}
	if strings.Contains(spec, ",") {
		return 0, size, false, nil
	}
	a, b, ok := strings.Cut(strings.TrimSpace(spec), "-")
	if !ok {
		return 0, 0, false, fmt.Errorf("bad range %q", v)
	}
	switch {
	case a == "":
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 {
			return 0, 0, false, fmt.Errorf("bad range %q", v)
		}
		if size == 0 { // no last byte to give: RFC 9110 §14.1.3
			return 0, 0, false, fmt.Errorf("range %q of an empty file", v)
		}
		n = min(n, size)
		return size - n, n, true, nil
	default:
		s, err := strconv.ParseInt(a, 10, 64)
		if err != nil || s < 0 {
			return 0, 0, false, fmt.Errorf("bad range %q", v)
		}
		if s >= size {
			return 0, 0, false, fmt.Errorf("range %q starts past the end of the %d-byte file", v, size)
		}
		e := size - 1
		if b != "" {
			if e, err = strconv.ParseInt(b, 10, 64); err != nil || e < s {
				return 0, 0, false, fmt.Errorf("bad range %q", v)
			}
			e = min(e, size-1)
		}
		return s, e - s + 1, true, nil
	}
}
