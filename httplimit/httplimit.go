// Package httplimit is sluice's net/http middleware: it checks every request
// against a set of limits (per client IP, per header value, global, ...) in
// one all-or-nothing sluice Check, answers refusals with 429, Retry-After
// and an RFC 9457 problem document, and sends the RateLimit-Policy and
// RateLimit header fields (draft-ietf-httpapi-ratelimit-headers-11) on every
// response.
//
// The middleware has the standard shape func(http.Handler) http.Handler, so
// it works with net/http's ServeMux, chi and any router built on them.
package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// Limit is one limit the middleware applies to each request.
type Limit struct {
	// Name identifies the limit in response headers and problem
	// documents ("per-ip"). Printable ASCII, unique within a middleware.
	Name string
	// Key returns the key a request is counted under. An empty key skips
	// this limit for the request (for example a per-user limit on an
	// anonymous request).
	Key KeyFunc
	// Limit is the algorithm and its parameters.
	Limit sluice.Limit
}

// KeyFunc returns the key of a request for one limit.
type KeyFunc func(r *http.Request) (string, error)

// Global counts every request under one key.
func Global(*http.Request) (string, error) { return "global", nil }

// ByHeader keys requests by the value of a request header; requests without
// it are not limited by this limit. Values longer than 256 bytes are refused
// with an error rather than stored.
func ByHeader(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if len(v) > maxKeyValue {
			return "", fmt.Errorf("httplimit: header %s is %d bytes, longer than %d", name, len(v), maxKeyValue)
		}
		return v, nil
	}
}

// ByIP keys requests by client address, as c resolves it.
func ByIP(c *ClientIP) KeyFunc { return c.Key }

// maxKeyValue bounds key parts taken from a request, so that no client can
// make the store hold arbitrarily long keys.
const maxKeyValue = 256

// Config configures the middleware. Only Limits is required.
type Config struct {
	// Limits are checked together for every request: if any refuses,
	// none is charged.
	Limits []Limit

	// Refused writes the response to a refused request, replacing the
	// default 429 problem document (the headers are already set). Use it to
	// localise the message or to serve a fallback instead.
	Refused func(w http.ResponseWriter, r *http.Request, d sluice.Decision, limit string)

	// OnError decides what happens when a key cannot be computed or the
	// store fails. It returns true to let the request through (fail open)
	// or false to refuse it with 503. Default: fail open and log the
	// error, at most once per second.
	OnError func(r *http.Request, err error) bool

	// MaxDelay bounds the shaping delay the middleware will wait for before
	// calling the handler (leaky_bucket limits). Default 1s.
	MaxDelay time.Duration

	// LegacyHeaders also sends X-RateLimit-Limit, -Remaining and -Reset
	// for the binding limit.
	LegacyHeaders bool

	// Logger receives the middleware's logs. Default slog.Default().
	Logger *slog.Logger
}

// New returns the middleware for limiter and cfg.
func New(limiter *sluice.Limiter, cfg Config) (func(http.Handler) http.Handler, error) {
	if limiter == nil {
		return nil, errors.New("httplimit: New: limiter is nil")
	}
	if len(cfg.Limits) == 0 {
		return nil, errors.New("httplimit: New: no limits")
	}
	seen := map[string]bool{}
	for i, l := range cfg.Limits {
		if err := checkName(l.Name); err != nil {
			return nil, fmt.Errorf("httplimit: limit %d: %w", i, err)
		}
		if seen[l.Name] {
			return nil, fmt.Errorf("httplimit: limit %q appears twice", l.Name)
		}
		seen[l.Name] = true
		if l.Key == nil {
			return nil, fmt.Errorf("httplimit: limit %q: Key is nil", l.Name)
		}
		if err := l.Limit.Validate(); err != nil {
			return nil, fmt.Errorf("httplimit: limit %q: %w", l.Name, err)
		}
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &middleware{limiter: limiter, cfg: cfg}
	if cfg.OnError == nil {
		m.cfg.OnError = m.failOpen
	}
	m.pool.New = func() any {
		return &scratch{
			reqs:   make([]sluice.Request, 0, len(cfg.Limits)),
			ds:     make([]sluice.Decision, 0, len(cfg.Limits)),
			limits: make([]Limit, 0, len(cfg.Limits)),
		}
	}
	return m.wrap, nil
}

func checkName(name string) error {
	if name == "" {
		return errors.New("Name is empty")
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return fmt.Errorf("Name %q: only printable ASCII is allowed", name)
		}
	}
	return nil
}

type middleware struct {
	limiter *sluice.Limiter
	cfg     Config
	pool    sync.Pool
	logMu   sync.Mutex
	lastLog time.Time
}

// scratch holds one request's slices, reused across requests.
type scratch struct {
	reqs   []sluice.Request
	ds     []sluice.Decision
	limits []Limit
}

func (m *middleware) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sc := m.pool.Get().(*scratch)
		defer m.pool.Put(sc)
		sc.reqs, sc.ds, sc.limits = sc.reqs[:0], sc.ds[:0], sc.limits[:0]
		for _, l := range m.cfg.Limits {
			key, err := l.Key(r)
			if err != nil {
				m.failed(w, r, next, fmt.Errorf("key of limit %q: %w", l.Name, err))
				return
			}
			if key == "" {
				continue
			}
			sc.reqs = append(sc.reqs, sluice.Request{Key: l.Name + "\x00" + key, Limit: l.Limit, Cost: 1})
			sc.ds = append(sc.ds, sluice.Decision{})
			sc.limits = append(sc.limits, l)
		}
		if len(sc.reqs) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		d, err := m.limiter.CheckEach(r.Context(), sc.reqs, sc.ds)
		if err != nil {
			m.failed(w, r, next, err)
			return
		}
		setHeaders(w.Header(), sc.limits, sc.ds, d, m.cfg.LegacyHeaders)
		var leases []int
		for i, di := range sc.ds {
			if di.Lease != 0 {
				leases = append(leases, i)
			}
		}
		if d.Allowed && len(leases) > 0 {
			reqs := append([]sluice.Request(nil), sc.reqs...)
			ds := append([]sluice.Decision(nil), sc.ds...)
			defer func() {
				ctx := context.WithoutCancel(r.Context())
				for _, i := range leases {
					m.limiter.Release(ctx, reqs[i].Key, reqs[i].Limit, ds[i].Lease)
				}
			}()
		}
		if !d.Allowed || d.Delay > m.cfg.MaxDelay {
			m.refuse(w, r, d, sc)
			return
		}
		if d.Delay > 0 {
			t := time.NewTimer(d.Delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return // the client has gone
			}
		}
		next.ServeHTTP(w, r)
	})
}

// refuse answers a refused request: the caller's Refused hook, or a 429
// problem document naming the limit that refused.
func (m *middleware) refuse(w http.ResponseWriter, r *http.Request, d sluice.Decision, sc *scratch) {
	name := ""
	for i, di := range sc.ds {
		if !di.Allowed && di.RetryAfter == d.RetryAfter {
			name = sc.limits[i].Name
			break
		}
	}
	if m.cfg.Refused != nil {
		m.cfg.Refused(w, r, d, name)
		return
	}
	retry := max(1, seconds(d.RetryAfter))
	if d.Allowed { // admitted with a shaping delay longer than MaxDelay
		retry = max(1, seconds(d.Delay))
		w.Header().Set(headerRetryAfter, strconv.FormatInt(retry, 10))
	}
	writeProblem(w, http.StatusTooManyRequests, "Too Many Requests",
		fmt.Sprintf("Rate limit %q exceeded; retry in %d s.", name, retry),
		map[string]any{"limit": name, "retry_after": retry})
}

func (m *middleware) failed(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	if m.cfg.OnError(r, err) {
		next.ServeHTTP(w, r)
		return
	}
	writeProblem(w, http.StatusServiceUnavailable, "Service Unavailable", "The rate limiter is unavailable.", nil)
}

// failOpen is the default OnError: admit, and log at most once a second.
func (m *middleware) failOpen(r *http.Request, err error) bool {
	m.logMu.Lock()
	now := time.Now()
	log := now.Sub(m.lastLog) >= time.Second
	if log {
		m.lastLog = now
	}
	m.logMu.Unlock()
	if log {
		m.cfg.Logger.Warn("httplimit: admitting a request the limiter could not decide", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	return true
}

// writeProblem writes an RFC 9457 problem document.
func writeProblem(w http.ResponseWriter, status int, title, detail string, ext map[string]any) {
	doc := map[string]any{"type": "about:blank", "title": title, "status": status, "detail": detail}
	for k, v := range ext {
		doc[k] = v
	}
	body, _ := json.Marshal(doc) // only strings and ints: cannot fail
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}
