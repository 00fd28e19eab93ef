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
	// anonymous request). A key longer than MaxKeyValue bytes is replaced
	// by its digest (KeyValue), so a KeyFunc may return request data as it
	// is.
	Key KeyFunc
	// Limit is the algorithm and its parameters.
	Limit sluice.Limit
}

// KeyFunc returns the key of a request for one limit.
type KeyFunc func(r *http.Request) (string, error)

// Global counts every request under one key.
func Global(*http.Request) (string, error) { return "global", nil }

// ByHeader keys requests by the value of a request header; requests without
// it are not limited by this limit. A value longer than MaxKeyValue bytes is
// counted under its digest (see KeyValue), like every key of Config.Limits.
func ByHeader(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) { return r.Header.Get(name), nil }
}

// ByIP keys requests by client address, as c resolves it.
func ByIP(c *ClientIP) KeyFunc { return c.Key }

// Planned is one limit to check for one request, as a Source plans it.
type Planned struct {
	// Name identifies the limit in headers and refusals.
	Name string
	// Key is the store key; the Source makes keys of different limits
	// distinct, and bounds the parts it takes from the request with
	// KeyValue.
	Key string
	// Limit and Cost are what is charged.
	Limit sluice.Limit
	Cost  int64
	// Action says what to do when this limit refuses; nil rejects with
	// the default response.
	Action *Action
}

// Source decides which limits apply to a request: a fixed list
// (Config.Limits), or a policy (package policy) that matches rules.
type Source interface {
	// Plan appends to dst the limits that apply to r.
	Plan(r *http.Request, dst []Planned) ([]Planned, error)
}

// Action says what happens when a limit refuses a request. The zero value
// rejects with 429 and a problem document.
type Action struct {
	// Wait makes the request wait until it is admitted, for at most
	// MaxDelay, before it is rejected.
	Wait     bool
	MaxDelay time.Duration
	// Shadow admits the request anyway: the refusal is only counted and
	// logged (aggregated), to try a limit out before enforcing it.
	Shadow bool
	// Status, ContentType and Body replace the default rejection (429,
	// application/problem+json). Retry-After and the RateLimit fields are
	// sent either way.
	Status      int
	ContentType string
	Body        []byte
	// FailClosed refuses requests this limit applies to, with 503, when
	// the store fails, instead of asking Config.OnError. Retry-After is 1
	// s, or the store error's RetryAfter() time.Duration rounded up to
	// whole seconds when it has that method (package failover's errors
	// carry the time until its circuit breaker next probes the store).
	FailClosed bool
}

// Config configures the middleware. Give Limits or Source.
type Config struct {
	// Limits are checked together for every request: if any refuses,
	// none is charged.
	Limits []Limit

	// Source plans the limits of each request instead of Limits, for
	// example a *policy.Policy or a policy.Holder.
	Source Source

	// Refused writes the response to a refused request, replacing the
	// default 429 problem document and any Action's body (the headers are
	// already set). Use it to localise the message or to serve a fallback.
	Refused func(w http.ResponseWriter, r *http.Request, d sluice.Decision, limit string)

	// OnError decides what happens when a key cannot be computed or the
	// store fails. It returns true to let the request through (fail open)
	// or false to refuse it with 503. Default: fail open and log the
	// error, at most once per second.
	OnError func(r *http.Request, err error) bool

	// MaxDelay bounds the shaping delay (leaky_bucket limits) the
	// middleware waits before calling the handler, and an Action.Wait's
	// MaxDelay bounds it for that limit instead: a request whose delay
	// would be longer is refused by the store without being counted.
	// Default 1s.
	MaxDelay time.Duration

	// MaxWaiting bounds how many requests may wait at once under each limit
	// (by name), for a shaping delay or an Action.Wait: a waiting request
	// holds its goroutine, connection and buffers, and a flood of them
	// would otherwise pile up for MaxDelay each. A request that would wait
	// beyond the bound is refused at once, as if its delay were longer
	// than MaxDelay (a shaping limit has then already counted it). Default
	// 1000; negative: no request waits.
	MaxWaiting int

	// LegacyHeaders also sends X-RateLimit-Limit, -Remaining and -Reset
	// for the binding limit.
	LegacyHeaders bool

	// DegradedHeader, if set, names a response header field sent with the
	// value "true" when the store meant to decide could not and a failure
	// mode did (Decision.Degraded; see package failover), so that clients
	// and logs downstream can tell. Example: "Sluice-Degraded".
	DegradedHeader string

	// Logger receives the middleware's logs. Default slog.Default().
	// Refusals, real and shadow, are logged at Info as one line per second
	// in which there were any, never one per request: the count per limit,
	// the ten keys refused most with their counts, and how many more keys
	// and refusals there were (at most 1,000 keys are counted per second,
	// so logging holds bounded memory). Errors are logged at most once a
	// second.
	Logger *slog.Logger

	// Observe, if set, is called once for every decided check of a request
	// (the enforced limits, and the shadow limits separately), with the
	// limit that decided it: the one that refused, or the one closest to
	// refusing. It feeds metrics and status pages; it must be fast and safe
	// for concurrent use.
	Observe func(o Observation)
}

// Outcome is what the middleware did with a request.
type Outcome uint8

const (
	// Admitted requests went on to the handler at once.
	Admitted Outcome = iota + 1
	// Delayed requests went on after a shaping delay or a wait.
	Delayed
	// Refused requests were answered with a refusal.
	Refused
	// ShadowRefused requests would have been refused by a shadow limit.
	ShadowRefused
	// Failed requests could not be decided (a key or store error); OnError
	// or FailClosed chose what happened to them.
	Failed
)

func (o Outcome) String() string {
	switch o {
	case Admitted:
		return "admitted"
	case Delayed:
		return "delayed"
	case Refused:
		return "refused"
	case ShadowRefused:
		return "shadow_refused"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// Observation describes one decided check, for Config.Observe.
type Observation struct {
	Request *http.Request
	// Limit and Key are the deciding limit's name and store key (empty
	// when the check failed before any limit was planned).
	Limit, Key string
	Outcome    Outcome
	// Decision is the deciding limit's decision; Decision.Degraded tells a
	// decision made without the intended store.
	Decision sluice.Decision
	// Err is the error of a Failed check.
	Err error
}

// New returns the middleware for limiter and cfg.
func New(limiter *sluice.Limiter, cfg Config) (func(http.Handler) http.Handler, error) {
	if limiter == nil {
		return nil, errors.New("httplimit: New: limiter is nil")
	}
	switch {
	case cfg.Source != nil && len(cfg.Limits) > 0:
		return nil, errors.New("httplimit: New: give Limits or Source, not both")
	case cfg.Source == nil && len(cfg.Limits) == 0:
		return nil, errors.New("httplimit: New: no limits")
	case cfg.Source == nil:
		src, err := newStatic(cfg.Limits)
		if err != nil {
			return nil, err
		}
		cfg.Source = src
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = time.Second
	}
	if cfg.MaxWaiting == 0 {
		cfg.MaxWaiting = 1000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &middleware{limiter: limiter, cfg: cfg}
	if cfg.OnError == nil {
		m.cfg.OnError = m.failOpen
	}
	m.refused = newRefusalLog(cfg.Logger, "httplimit: refused requests")
	m.shadow = newRefusalLog(cfg.Logger, "httplimit: shadow limits would have refused requests")
	m.waiting.max = cfg.MaxWaiting
	m.pool.New = func() any { return &scratch{} }
	return m.wrap, nil
}

// static is the Source of Config.Limits.
type static struct {
	limits   []Limit
	prefixes []string // each limit's key prefix: its name and a NUL
}

func newStatic(limits []Limit) (*static, error) {
	seen := map[string]bool{}
	for i, l := range limits {
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
	st := &static{limits: limits}
	for _, l := range limits {
		st.prefixes = append(st.prefixes, l.Name+"\x00")
	}
	return st, nil
}

func (s *static) Plan(r *http.Request, dst []Planned) ([]Planned, error) {
	for i, l := range s.limits {
		key, err := l.Key(r)
		if err != nil {
			return dst, fmt.Errorf("key of limit %q: %w", l.Name, err)
		}
		if key != "" {
			dst = append(dst, Planned{Name: l.Name, Key: s.prefixes[i] + KeyValue(key), Limit: l.Limit, Cost: 1})
		}
	}
	return dst, nil
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
	refused *refusalLog // enforced refusals, logged once per interval
	shadow  *refusalLog // shadow refusals, likewise
	waiting waitQueue
}

// scratch holds one request's slices, reused across requests.
type scratch struct {
	planned  []Planned
	enforced []Planned
	shadow   []Planned
	reqs     []sluice.Request
	ds       []sluice.Decision
	buf      []byte
	maxDelay time.Duration // the longest MaxDelay of reqs
}

// check runs one all-or-nothing Check of ps, leaving the decisions in
// sc.ds.
func (m *middleware) check(r *http.Request, sc *scratch, ps []Planned) (sluice.Decision, error) {
	sc.reqs, sc.ds, sc.maxDelay = sc.reqs[:0], sc.ds[:0], 0
	for _, p := range ps {
		// A shaped request that would wait longer than it may is refused
		// by the store, uncharged.
		bound := m.cfg.MaxDelay
		if p.Action != nil && p.Action.Wait && p.Action.MaxDelay > 0 {
			bound = p.Action.MaxDelay
		}
		sc.maxDelay = max(sc.maxDelay, bound)
		sc.reqs = append(sc.reqs, sluice.Request{Key: p.Key, Limit: p.Limit, Cost: p.Cost, MaxDelay: bound})
		sc.ds = append(sc.ds, sluice.Decision{})
	}
	return m.limiter.CheckEach(r.Context(), sc.reqs, sc.ds)
}

func (m *middleware) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sc := m.pool.Get().(*scratch)
		defer m.pool.Put(sc)
		var err error
		sc.planned, err = m.cfg.Source.Plan(r, sc.planned[:0])
		if err != nil {
			m.observe(Observation{Request: r, Outcome: Failed, Err: err})
			m.failed(w, r, next, err)
			return
		}
		sc.enforced, sc.shadow = sc.enforced[:0], sc.shadow[:0]
		for _, p := range sc.planned {
			if p.Action != nil && p.Action.Shadow {
				sc.shadow = append(sc.shadow, p)
			} else {
				sc.enforced = append(sc.enforced, p)
			}
		}
		if len(sc.enforced) > 0 {
			d, err := m.check(r, sc, sc.enforced)
			if err != nil {
				m.observe(Observation{Request: r, Limit: sc.enforced[0].Name, Key: sc.enforced[0].Key, Outcome: Failed, Err: err})
				for _, p := range sc.enforced {
					if p.Action != nil && p.Action.FailClosed {
						m.unavailable(w, r, err, true)
						return
					}
				}
				m.failed(w, r, next, err)
				return
			}
			refuser, waited := binding(sc.ds, d), false
			if !d.Allowed {
				if a := sc.enforced[refuser].Action; a != nil && a.Wait && d.RetryAfter <= a.MaxDelay && m.waiting.enter(sc.enforced[refuser].Name) {
					name := sc.enforced[refuser].Name
					d, err = m.wait(r, sc, a.MaxDelay, d)
					m.waiting.leave(name)
					if err != nil && r.Context().Err() != nil {
						return // the client went away while waiting: nothing to answer
					}
					if err != nil {
						m.observe(Observation{Request: r, Limit: sc.enforced[refuser].Name, Key: sc.enforced[refuser].Key, Outcome: Failed, Err: err})
						m.failed(w, r, next, err)
						return
					}
					refuser = binding(sc.ds, d)
					waited = d.Allowed
				}
			}
			// A shaping delay is waited out only within MaxDelay and while
			// the limit has room in its waiting line.
			tooLong, shaping := d.Delay > sc.maxDelay, false
			if d.Allowed && d.Delay > 0 && !tooLong {
				shaping = m.waiting.enter(sc.enforced[refuser].Name)
				tooLong = !shaping
			}
			if m.cfg.Observe != nil {
				o := Observation{Request: r, Limit: sc.enforced[refuser].Name, Key: sc.enforced[refuser].Key, Decision: d, Outcome: Admitted}
				switch {
				case !d.Allowed || tooLong:
					o.Outcome = Refused
				case waited || d.Delay > 0:
					o.Outcome = Delayed
				}
				m.cfg.Observe(o)
			}
			sc.buf = setHeaders(w.Header(), sc.enforced, sc.ds, d, m.cfg.LegacyHeaders, sc.buf)
			if m.cfg.DegradedHeader != "" && degraded(sc.ds) {
				w.Header().Set(m.cfg.DegradedHeader, "true")
			}
			if d.Allowed {
				defer m.releaser(sc)()
			}
			if !d.Allowed || tooLong {
				m.refused.add(sc.enforced[refuser].Name, sc.enforced[refuser].Key)
				m.refuse(w, r, d, sc.enforced[refuser])
				return
			}
			if shaping {
				ok := sleep(r.Context(), d.Delay)
				m.waiting.leave(sc.enforced[refuser].Name)
				if !ok {
					return // the client has gone
				}
			}
		}
		if len(sc.shadow) > 0 {
			d, err := m.check(r, sc, sc.shadow)
			switch {
			case err != nil:
				m.observe(Observation{Request: r, Limit: sc.shadow[0].Name, Key: sc.shadow[0].Key, Outcome: Failed, Err: err})
			case d.Allowed:
				defer m.releaser(sc)() // shadow concurrency limits hold leases too
			default:
				p := sc.shadow[binding(sc.ds, d)]
				m.shadow.add(p.Name, p.Key)
				m.observe(Observation{Request: r, Limit: p.Name, Key: p.Key, Outcome: ShadowRefused, Decision: d})
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (m *middleware) observe(o Observation) {
	if m.cfg.Observe != nil {
		m.cfg.Observe(o)
	}
}

// degraded reports whether any decision was made without the intended store.
func degraded(ds []sluice.Decision) bool {
	for _, d := range ds {
		if d.Degraded {
			return true
		}
	}
	return false
}

// binding returns the index of the decision that governs d.
func binding(ds []sluice.Decision, d sluice.Decision) int {
	for i, di := range ds {
		if di.Allowed == d.Allowed && di.RetryAfter == d.RetryAfter && di.Remaining == d.Remaining {
			return i
		}
	}
	return 0
}

// wait retries a refused check after each RetryAfter until it is admitted
// or maxDelay has passed.
func (m *middleware) wait(r *http.Request, sc *scratch, maxDelay time.Duration, d sluice.Decision) (sluice.Decision, error) {
	deadline := time.Now().Add(maxDelay)
	for !d.Allowed && time.Now().Add(d.RetryAfter).Before(deadline.Add(time.Millisecond)) {
		if !sleep(r.Context(), d.RetryAfter) {
			return d, r.Context().Err()
		}
		var err error
		if d, err = m.limiter.CheckEach(r.Context(), sc.reqs, sc.ds); err != nil {
			return d, err
		}
	}
	return d, nil
}

// releaser returns a function that gives back the concurrency leases of
// the last check, to run when the handler has finished.
func (m *middleware) releaser(sc *scratch) func() {
	var reqs []sluice.Request
	var leases []uint64
	for i, d := range sc.ds {
		if d.Lease != 0 {
			reqs, leases = append(reqs, sc.reqs[i]), append(leases, d.Lease)
		}
	}
	return func() {
		for i, req := range reqs {
			m.limiter.Release(context.Background(), req.Key, req.Limit, leases[i])
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// refuse answers a refused request: the Refused hook, the limit's Action,
// or a 429 problem document naming the limit.
func (m *middleware) refuse(w http.ResponseWriter, r *http.Request, d sluice.Decision, p Planned) {
	if m.cfg.Refused != nil {
		m.cfg.Refused(w, r, d, p.Name)
		return
	}
	retry := max(1, seconds(d.RetryAfter))
	if d.Allowed { // admitted with a shaping delay longer than MaxDelay
		retry = max(1, seconds(d.Delay))
		w.Header().Set(headerRetryAfter, strconv.FormatInt(retry, 10))
	}
	if a := p.Action; a != nil && (a.Status != 0 || a.Body != nil) {
		status := a.Status
		if status == 0 {
			status = http.StatusTooManyRequests
		}
		if a.ContentType != "" {
			w.Header().Set("Content-Type", a.ContentType)
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(a.Body)))
		w.WriteHeader(status)
		w.Write(a.Body)
		return
	}
	writeProblem(w, http.StatusTooManyRequests, "Too Many Requests",
		fmt.Sprintf("Rate limit %q exceeded; retry in %d s.", p.Name, retry),
		map[string]any{"limit": p.Name, "retry_after": retry})
}

func (m *middleware) failed(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	if m.cfg.OnError(r, err) {
		next.ServeHTTP(w, r)
		return
	}
	m.unavailable(w, r, err, false)
}

// unavailable refuses a request the limiter could not decide, with 503 and
// a Retry-After of err's RetryAfter() if it has one, else 1 s. With logErr,
// err is logged (at most once a second).
func (m *middleware) unavailable(w http.ResponseWriter, r *http.Request, err error, logErr bool) {
	if logErr && m.logDue() {
		m.cfg.Logger.Warn("httplimit: refusing a request the limiter could not decide (fail closed)", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	retry := int64(1)
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) {
		retry = max(1, seconds(ra.RetryAfter()))
	}
	w.Header().Set(headerRetryAfter, strconv.FormatInt(retry, 10))
	writeProblem(w, http.StatusServiceUnavailable, "Service Unavailable", "The rate limiter is unavailable.", nil)
}

// logDue reports whether a once-a-second log line may be written now.
func (m *middleware) logDue() bool {
	m.logMu.Lock()
	defer m.logMu.Unlock()
	now := time.Now()
	if now.Sub(m.lastLog) < time.Second {
		return false
	}
	m.lastLog = now
	return true
}

// failOpen is the default OnError: admit, and log at most once a second.
func (m *middleware) failOpen(r *http.Request, err error) bool {
	if m.logDue() {
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
