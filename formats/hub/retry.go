package hub

// A request's attempts: the watchdog that cuts off one without progress,
// retries with back-off or the server's own wait (Retry-After, the hub's
// RateLimit), the pause a rate limit puts on every request, and which
// failures no retry can fix.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// watchdog cancels an attempt that makes no progress for d: its timer
// starts with the request and restarts at each read of the body that
// brings bytes.
type watchdog struct {
	t *time.Timer
	d time.Duration
}

type watchdogKey struct{}

// errStalled is the cause of an attempt cut off by its watchdog.
var errStalled = errors.New("no progress")

// rateLimitReset reads the hub's RateLimit header ("api";r=0;t=N, the IETF
// draft's form): the window resets in N seconds; a retry waits N+1, as
// huggingface_hub does. 0 when the header says nothing usable.
func rateLimitReset(v string) time.Duration {
	for _, part := range strings.Split(v, ";") {
		if t, ok := strings.CutPrefix(strings.TrimSpace(part), "t="); ok {
			if n, err := strconv.Atoi(t); err == nil && n >= 0 {
				return time.Duration(n+1) * time.Second
			}
		}
	}
	return 0
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := time.Parse(time.RFC1123, v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// maxRetryAfter is the longest Retry-After a request waits for before it
// tries again; a server asking for longer gets its error back at once.
const maxRetryAfter = 60 * time.Second

// do runs one attempt-bounded operation with retries: temporary HTTP errors,
// network errors and short bodies are retried with exponential backoff (or
// the server's Retry-After); anything else returns at once.
func (c *Client) do(ctx context.Context, op func(ctx context.Context) error) error {
	var err error
	for attempt := 0; ; attempt++ {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		if err := c.waitPause(ctx); err != nil {
			return err
		}
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		actx, cancel := context.WithCancelCause(ctx)
		wd := &watchdog{d: c.timeout, t: time.AfterFunc(c.timeout, func() { cancel(errStalled) })}
		err = op(context.WithValue(actx, watchdogKey{}, wd))
		wd.t.Stop()
		timedOut := errors.Is(context.Cause(actx), errStalled) && ctx.Err() == nil
		cancel(nil)
		<-c.sem
		if err == nil {
			return nil
		}
		if timedOut {
			// The attempt's own context was cancelled, so err says
			// "canceled": a stall is a timeout (retried, and never taken
			// for the user's cancel by a caller that checks Canceled).
			err = fmt.Errorf("%s (no progress within %v): %w", err.Error(), c.timeout, context.DeadlineExceeded)
		}
		var he *HTTPError
		limited := errors.As(err, &he) && he.RetryAfter > 0
		if limited && he.RetryAfter <= maxRetryAfter && (he.Status == 429 || he.Status == 503) && sameHost(he.URL, c.endpoint) {
			c.pause(he.RetryAfter) // the others wait too, even when this attempt was the last
		}
		if attempt >= c.retries || !retryable(err, ctx) {
			return err
		}
		wait := c.backoff << attempt
		wait += time.Duration(rand.Int64N(int64(wait/4 + 1)))
		if limited {
			if he.RetryAfter > maxRetryAfter { // waiting it out in pieces only delays the answer
				return fmt.Errorf("%w (the server asks to retry after %v; not waited for)", err, he.RetryAfter)
			}
			wait = he.RetryAfter
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// pause holds every attempt back for d from now (or longer, if an earlier
// pause ends later).
func (c *Client) pause(d time.Duration) {
	c.pauseMu.Lock()
	defer c.pauseMu.Unlock()
	if until := time.Now().Add(d); until.After(c.pauseUntil) {
		c.pauseUntil = until
	}
}

// waitPause waits out the hub's pause, if one runs, and a little more (up
// to a tenth of it, at most half a second, at random), so that the waiting
// requests do not all arrive at once when it ends.
func (c *Client) waitPause(ctx context.Context) error {
	for {
		c.pauseMu.Lock()
		d := time.Until(c.pauseUntil)
		c.pauseMu.Unlock()
		if d <= 0 {
			return nil
		}
		d += time.Duration(rand.Int64N(int64(min(d/10, 500*time.Millisecond)) + 1))
		if err := sleep(ctx, d); err != nil {
			return err
		}
	}
}

// sleep waits d, or until ctx is done (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func retryable(err error, ctx context.Context) bool {
	if ctx.Err() != nil || errors.Is(err, ErrChanged) {
		return false
	}
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Temporary()
	}
	var perm *permanentError
	return !errors.As(err, &perm) // network errors, resets, short bodies, timeouts
}

// permanentError marks failures no retry can fix (a malformed response).
type permanentError struct{ error }

func (p *permanentError) Unwrap() error { return p.error }
