package sluiceclient

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/deadline"
)

var _ http.RoundTripper = (*Client)(nil)

// maxBufferedBody bounds the body of a refused response that is read into
// memory so the connection can be reused while the retry waits. A refusal
// with a longer body is returned instead of retried.
const maxBufferedBody = 64 << 10

// RoundTrip sends req through Config.Base, and retries it while the server
// refuses it with 429 Too Many Requests or 503 Service Unavailable, if it is
// safe to retry: its method is idempotent (GET, HEAD, OPTIONS, TRACE, PUT,
// DELETE) or it carries the Config.IdempotencyKeyHeader, and its body can be
// sent again (it has none, or req.GetBody is set, as http.NewRequest sets
// it for in-memory bodies).
//
// Each retry waits what the server asked for (Retry-After, in seconds or
// as an HTTP-date; else the reset t of an exhausted member of the RateLimit
// field) plus a full-jitter exponential backoff. When no retry is possible
// (none left, the budget spent, or a wait that would outlast the request's
// deadline or Config.MaxRetryAfter) the server's last answer is returned at
// once. Errors from Base are returned as they are, not retried: whether the
// server saw the request is unknown.
func (c *Client) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	retryable := c.safe(req)
	c.budget.request(time.Now())
	var last *http.Response
	for n := 0; ; n++ {
		r := req
		if n > 0 {
			var err error
			if r, err = rewind(req); err != nil {
				return last, nil
			}
		}
		if err := c.admit(ctx); err != nil {
			closeBody(r)
			if last != nil && ctx.Err() == nil {
				return last, nil // throttled, or paced past the deadline: the server's answer stands
			}
			return nil, err
		}
		resp, err := c.s.Base.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		refused := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
		if !refused && c.throttle != nil {
			c.throttle.accepted(now)
		}
		c.s.Pacer.observe(resp.Header, now)
		if !refused || !retryable {
			return resp, nil
		}
		wait, ok := c.retryWait(ctx, n, serverWait(resp.Header, now))
		if !ok || !buffer(resp) || !c.budget.withdraw(now) {
			return resp, nil
		}
		last = resp
		if err := deadline.Sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// safe reports whether req may be sent more than once.
func (c *Client) safe(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
	default:
		if req.Header.Get(c.s.IdempotencyKeyHeader) == "" {
			return false
		}
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// serverWait is the wait a refusal asks for: its Retry-After, else the
// reset of an exhausted RateLimit member, else none.
func serverWait(h http.Header, now time.Time) time.Duration {
	if d, ok := retryAfter(h, now); ok {
		return d
	}
	if q, ok := rateLimit(h); ok && q.remaining == 0 {
		return q.reset
	}
	return 0
}

// rewind returns a copy of req with a fresh body, for a retry.
func rewind(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.Body == nil || req.Body == http.NoBody {
		return r, nil
	}
	if req.GetBody == nil {
		return nil, errors.New("sluiceclient: the request body cannot be sent again: set req.GetBody")
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("sluiceclient: rewinding the request body for a retry: %w", err)
	}
	r.Body = body
	return r, nil
}

// buffer reads a refused response's body into memory and closes it, so that
// its connection is free while the retry waits and the response can still
// be returned whole if the retry is not made. It reports false, leaving the
// body readable as it was, when the body is longer than maxBufferedBody.
func buffer(resp *http.Response) bool {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBufferedBody+1))
	if len(b) > maxBufferedBody {
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
		return false
	}
	resp.Body.Close()
	if err != nil {
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(b), errReader{err}), io.NopCloser(nil)}
		return true
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return true
}

type readCloser struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// closeBody closes the body of a request that will not be sent, as a
// RoundTripper must.
func closeBody(r *http.Request) {
	if r.Body != nil {
		r.Body.Close()
	}
}
