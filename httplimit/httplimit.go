// Package httplimit is sluice's net/http middleware: it checks every request
// against a set of limits (per client IP, per header value, global, ...) in
// one all-or-nothing sluice Check, answers refusals with 429, Retry-After
// and an RFC 9457 problem document, and sends the RateLimit-Policy and
// RateLimit header fields (draft-ietf-httpapi-ratelimit-headers-11) on every
// response.
//
// It is a thin adapter over package decide, the decision path every sluice
// front-end shares: it plans the checks of a request (from Config.Limits or
// a Source such as a policy), lets a decide.Decider run them, and answers.
// A limit whose cost is known only after the response (Limit.Late, a
// policy's cost: {reserve...}) is settled from the response header or
// trailer the handler sets, once the handler returns.
//
// The middleware has the standard shape func(http.Handler) http.Handler, so
// it works with net/http's ServeMux, chi and any router built on them.
//
// Middlewares stack: one per client IP around a whole router and one per
// user around one route answer as one middleware would. A response lists
// the limits of every middleware the request passed, outermost first, in
// RateLimit-Policy and RateLimit (Retry-After is the longest wait), and a
// request one of them does not let through (refused, invalid, failed) is
// charged by none. Each middleware charges when it decides, since it
// cannot know whether another will see the request; one further in that
// refuses gives back what those further out charged (decide.Stack), so
// for that moment another request may find an outer limit one request
// fuller than it ends, never emptier. A request waits the shaping delay of
// each middleware in turn, and each reports its own decisions to Observe.
// Only middlewares that answer the same response stack: a handler that
// serves a request of its own through a limited route (a batch endpoint)
// is charged further out whatever that request gets.
package httplimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/problem"
)

// Limit is one limit the middleware applies to each request.
type Limit struct {
	// Name identifies the limit in response headers and problem
	// documents ("per-ip"). Printable ASCII, unique within a middleware.
	Name string
	// Key returns the key a request is counted under. An empty key skips
	// this limit for the request (for example a per-user limit on an
	// anonymous request). A key longer than decide.MaxKeyValue bytes is
	// replaced by its digest (decide.KeyValue), so a KeyFunc may return
	// request data as it is.
	Key KeyFunc
	// Limit is the algorithm and its parameters.
	Limit sluice.Limit
	// Late, if set, takes the request's cost from its response: the
	// request reserves Reserve when it is decided, and the header or
	// trailer Late.Header the handler sets settles the actual cost
	// (decide.LateCost). Nil: every request costs 1.
	Late *decide.LateCost
	// Soft is the share of the limit, in thousandths (800: 80%), past
	// which an admitted response names it in SoftLimitHeader and a key
	// passing it is counted (Config.SoftLimit) and logged; 0: none.
	Soft int64
	// Reserve is what a request reserves under Late; 0 reserves nothing,
	// and the request is admitted while the limit has room left.
	Reserve int64
	// Entry, if set, makes the limit count only the requests that came
	// through that entry (sluice.EntryFrom of the request's context, which
	// a middleware further out marked: Config.Entry); the others are not
	// limited by it (Sentinel's CHAIN).
	Entry string
	// When, if set, makes the limit apply only while another limit of
	// Config.Limits uses more than When.Above of its budget, under the
	// key that limit's Key gives the request (Sentinel's RELATE; see
	// decide.Relation): otherwise it is neither checked nor charged. The
	// related key is read whether or not the related limit applies to the
	// request itself, so a list keeps writes and reads apart by entry:
	// writes with Entry "writes", reads with Entry "reads" and When
	// writes. A request the related limit gives no key (an empty key, an
	// error) is limited, as if the related limit were busy.
	When *decide.When
}

// KeyFunc returns the key of a request for one limit.
type KeyFunc func(r *http.Request) (string, error)

// Global counts every request under one key.
func Global(*http.Request) (string, error) { return "global", nil }

// ByHeader keys requests by the value of a request header; requests without
// it are not limited by this limit, and a request that sends it more than
// once, or under a name other servers read as the same (see HeaderValue),
// is refused with 400. A value longer than
// decide.MaxKeyValue bytes is counted under its digest (see
// decide.KeyValue), like every key of Config.Limits.
func ByHeader(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) { return HeaderValue(r, name) }
}

// HeaderValue returns the value of the header name (canonical form) that a
// key is made of, "" when it is absent. A header sent more than once is the
// client's error (a *decide.ClientError, answered with 400): counting one
// value while the handler reads another would let a client choose the key
// it is counted under. So is a header whose name differs from it only in
// '_' for '-' (X_User_ID for X-User-ID), which CGI, WSGI and Rack servers
// read as the same header.
func HeaderValue(r *http.Request, name string) (string, error) {
	for k := range r.Header {
		if k != name && strings.IndexByte(k, '_') >= 0 && SameHeader(k, name) {
			return "", &decide.ClientError{Field: "header " + k, Reason: fmt.Sprintf("names the same header as %s for many servers; send %s", name, name)}
		}
	}
	vs := r.Header.Values(name)
	if len(vs) > 1 {
		return "", &decide.ClientError{Field: "header " + name, Reason: fmt.Sprintf("sent %d times; a header a rate limit key is made of must be sent once", len(vs))}
	}
	if len(vs) == 0 {
		return "", nil
	}
	return vs[0], nil
}

// SameHeader reports whether two header names name the same header for
// some server: equal but for case, and for '_' against '-'.
func SameHeader(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	fold := func(c byte) byte {
		switch {
		case c == '_':
			return '-'
		case 'A' <= c && c <= 'Z':
			return c + 'a' - 'A'
		}
		return c
	}
	for i := 0; i < len(a); i++ {
		if fold(a[i]) != fold(b[i]) {
			return false
		}
	}
	return true
}

// ByIP keys requests by client address, as c resolves it. A nil c is the
// zero ClientIP: the TCP peer's address, no proxy trusted.
func ByIP(c *ClientIP) KeyFunc {
	if c == nil {
		c = &ClientIP{}
	}
	return c.Key
}

// Source decides which limits apply to a request: a fixed list
// (Config.Limits), or a policy (package policy) that matches rules. A
// Source that is also a decide.Relimiter (policy.Holder) has a cost
// settled after a reload charged under the limit as it is now.
type Source interface {
	// Plan appends to dst the checks of r. An error in what the client
	// sent is a *decide.ClientError, answered with a 4xx; a limit that
	// cannot be planned for another reason is a check with Err set, so
	// that its failure mode applies and the other limits are still
	// checked. Any other error is decided by Config.OnError.
	Plan(r *http.Request, dst []decide.Check) ([]decide.Check, error)
}

// Config configures the middleware. Give Limits or Source.
type Config struct {
	// Limits are checked together for every request: if any refuses,
	// none is charged.
	Limits []Limit

	// Source plans the checks of each request instead of Limits, for
	// example a *policy.Policy or a policy.Holder.
	Source Source

	// Refused writes the response to a refused request, replacing the
	// default 429 problem document and any Action's body (the headers are
	// already set). Use it to localise the message or to serve a fallback.
	Refused func(w http.ResponseWriter, r *http.Request, d sluice.Decision, limit string)

	// OnError is the failure mode of limits that name none (all of
	// Limits; a policy's rules without on_error) when a key cannot be
	// computed or the store fails: sluice.FailOpen lets the request
	// through uncounted, sluice.FailClosed refuses it with 503. An invalid
	// limit or cost is never let through. Default FailOpen, logged at
	// most once a second.
	OnError sluice.FailureMode

	// MaxDelay bounds the shaping delay (leaky_bucket limits) the
	// middleware waits before calling the handler; a request given a
	// longer one is refused. Default 1s.
	MaxDelay time.Duration

	// MaxWaiting bounds how many requests may wait at once under each limit
	// (by name), for a shaping delay or an Action.Wait: a waiting request
	// holds its goroutine, connection and buffers, and a flood of them
	// would otherwise pile up for MaxDelay each. A request that would wait
	// beyond the bound is refused at once. Default 1000; negative: no
	// request waits.
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
	// the ten keys refused most (masked, see ShowKeys) with their counts,
	// and how many more keys and refusals there were (at most 1,000 keys
	// are counted per second, so logging holds bounded memory). Errors are
	// logged at most once a second.
	Logger *slog.Logger

	// ShowKeys makes the refusal logs show key values instead of masks
	// (decide.ShowValue). Keys hold what clients send: addresses, tokens.
	ShowKeys bool

	// KeyText, if set, renders a store key in the refusal logs (see
	// decide.Config.KeyText). Default the key's value, masked unless
	// ShowKeys: decide.StoreKeyText(key, 1, ShowKeys), "part1=key#3f09a1c2d4e5".
	KeyText func(key string) string

	// Observe, if set, is called for each decided group of checks of a
	// request (the enforced limits together, and each shadow limit
	// checked, as ShadowAdmitted or ShadowRefused), with the limit that
	// decided it: the one that refused, or the one closest to refusing.
	// It feeds metrics and status pages (see package sluiceprom); it must
	// be fast and safe for concurrent use. Stacked middlewares each report
	// their own: a request one further in refuses was admitted here, and
	// is observed so, though its charge is given back.
	Observe func(r *http.Request, o decide.Observation)

	// Settled, if set, is called for each limit whose cost a response
	// settled (Limit.Late, a policy's cost: {reserve...}), once the
	// handler has returned. It feeds metrics; it must be fast and safe for
	// concurrent use.
	Settled func(r *http.Request, s decide.Settled)

	// OnWaiting, if set, is called with +1 when a request starts waiting
	// under a limit (a shaping delay, an action that waits) and -1 when it
	// stops: the gauge of waiting requests (see decide.Config.OnWaiting).
	OnWaiting func(limit string, delta int)

	// Entry, if set, marks the requests through this middleware as having
	// come through the entry Entry (sluice.WithEntry), for the limits that
	// count only the calls of an entry: its own (Limit.Entry, a policy's
	// when: {entry}) and those of the middlewares and handlers further in.
	// A request marked further out keeps its entry: a request's entry is
	// the first it came through. Default none.
	Entry string

	// SoftLimit, if set, is called when a request or a settle takes a key
	// past its limit's soft share (a policy's soft:, decide.Check.Soft):
	// a counter. An admitted response whose keys are past it carries the
	// SoftLimitHeader field, naming those limits.
	SoftLimit func(limit string)
}

// SoftLimitHeader is the response header field that names the limits an
// admitted request left past their soft share ("tokens-per-day").
const SoftLimitHeader = "Sluice-Soft-Limit"

// New returns the middleware for limiter and cfg.
func New(limiter *sluice.Limiter, cfg Config) (func(http.Handler) http.Handler, error) {
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
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.KeyText == nil {
		show := cfg.ShowKeys
		cfg.KeyText = func(key string) string { return decide.StoreKeyText(key, 1, show) }
	}
	dc, err := decide.New(limiter, decide.Config{
		Wait: true, MaxDelay: cfg.MaxDelay, MaxWaiting: cfg.MaxWaiting, OnError: cfg.OnError,
		Component: "httplimit", Logger: cfg.Logger, ShowKeys: cfg.ShowKeys, KeyText: cfg.KeyText,
		OnWaiting: cfg.OnWaiting, Relimit: relimiter(cfg.Source), OnSoft: onSoft(cfg.SoftLimit),
	})
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	m := &middleware{dc: dc, cfg: cfg}
	m.pool.New = func() any { return &scratch{} }
	return m.wrap, nil
}

// relimiter is src as a decide.Relimiter, if it is one (a policy.Holder:
// a settle after a reload charges the limit as it is now), else nil.
func relimiter(src Source) decide.Relimiter {
	if rl, ok := src.(decide.Relimiter); ok {
		return rl
	}
	return nil
}

// onSoft is decide.Config.OnSoft for Config.SoftLimit.
func onSoft(f func(limit string)) func(*decide.Check) {
	if f == nil {
		return nil
	}
	return func(c *decide.Check) { f(c.Name) }
}

// static is the Source of Config.Limits.
type static struct {
	limits  []Limit
	related []int // the index of the limit each relates to (When), -1 for none
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
		if l.Soft < 0 || l.Soft > 1000 {
			return nil, fmt.Errorf("httplimit: limit %q: Soft must be between 0 and 1000 thousandths (got %d)", l.Name, l.Soft)
		}
		if err := checkLate(l); err != nil {
			return nil, fmt.Errorf("httplimit: limit %q: %w", l.Name, err)
		}
	}
	names, whens := make([]string, len(limits)), make([]*decide.When, len(limits))
	for i, l := range limits {
		names[i], whens[i] = l.Name, l.When
	}
	related, err := decide.Relations(names, whens)
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	return &static{limits: limits, related: related}, nil
}

func (s *static) Plan(r *http.Request, dst []decide.Check) ([]decide.Check, error) {
	var buf [128]byte
	for i, l := range s.limits {
		if l.Entry != "" && sluice.EntryFrom(r.Context()) != l.Entry {
			continue
		}
		key, err := l.Key(r)
		switch {
		case err != nil:
			dst = append(dst, decide.Check{Name: l.Name, Limit: l.Limit, Err: fmt.Errorf("key: %w", err)})
		case key != "":
			k := decide.AppendKey(buf[:0], l.Name, key)
			c := decide.Check{Name: l.Name, Key: string(k), Limit: l.Limit, Cost: 1, Soft: l.Soft}
			if l.Late != nil {
				c.Cost, c.Late = l.Reserve, l.Late
			}
			if j := s.related[i]; j >= 0 {
				rel := &s.limits[j]
				rk, err := rel.Key(r)
				c.When = decide.ListRelation(rel.Name, rk, err, rel.Limit, l.When.Above)
			}
			dst = append(dst, c)
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
	dc   *decide.Decider
	cfg  Config
	pool sync.Pool
}

// scratch holds one request's slices, reused across requests.
type scratch struct {
	checks []decide.Check
	res    decide.Result
}

func (m *middleware) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sc := m.pool.Get().(*scratch)
		defer m.pool.Put(sc)
		if m.cfg.Entry != "" && sluice.EntryFrom(r.Context()) == "" {
			r = r.WithContext(sluice.WithEntry(r.Context(), m.cfg.Entry))
		}
		var err error
		sc.checks, err = m.cfg.Source.Plan(r, sc.checks[:0])
		if n := decide.BodyBytes(sc.checks); err == nil && n > 0 {
			err = reserveBody(r, sc.checks, n)
		}
		if err != nil { // decided as a check that could not be planned
			sc.checks = append(sc.checks[:0], decide.Check{Name: "plan", Err: err})
		}
		res := &sc.res
		m.dc.Run(r.Context(), sc.checks, res)
		defer res.Release()
		if m.cfg.Observe != nil {
			for _, o := range res.Observed {
				m.cfg.Observe(r, o)
			}
		}
		resp := response(w)
		if !res.Proceed() { // nor is anything charged further out
			decide.UndoOuter(r.Context(), resp)
		}
		if r.Context().Err() != nil {
			return // the client went away while waiting: nothing to answer
		}
		m.answer(w, r, next, res, resp)
	})
}

// response identifies the response w writes for decide.Stack: its header
// map, which the writers a router or middleware wraps around w share. A
// handler that dispatches a request of its own gives it another.
func response(w http.ResponseWriter) any {
	return reflect.ValueOf(w.Header()).UnsafePointer()
}

// answer writes the headers of a decided request and refuses it, or calls
// next with the request's context carrying res for the middlewares further
// in (decide.Stack).
func (m *middleware) answer(w http.ResponseWriter, r *http.Request, next http.Handler, res *decide.Result, resp any) {
	h := w.Header()
	before := m.writeFields(h, r, res, resp)
	switch res.Outcome {
	case decide.Invalid:
		ce, _ := decide.AsClientError(res.Err)
		problem.Write(w, ce.HTTPStatus(), http.StatusText(ce.HTTPStatus()), ce.Error(), nil)
		return
	case decide.Failed:
		unavailable(w, res.Err)
		return
	}
	if m.cfg.DegradedHeader != "" && degraded(res) {
		h.Set(m.cfg.DegradedHeader, "true")
	}
	if res.Outcome == decide.Refused {
		m.refuse(w, r, res)
		return
	}
	if soft := decide.PastSoft(res, nil); len(soft) > 0 {
		h.Set(SoftLimitHeader, strings.Join(soft, ", "))
	}
	r = r.WithContext(decide.Stack(r.Context(), res, resp, before))
	if res.Late() {
		cw := newCostWriter(w, res)
		defer cw.settle(r, m.cfg.Settled)
		w = cw.watch()
	}
	next.ServeHTTP(w, r)
}

// writeFields writes the RateLimit header fields of res after those of the
// middlewares stacked further out (decide.StackedFields), and returns the
// fields the response had before.
func (m *middleware) writeFields(h http.Header, r *http.Request, res *decide.Result, resp any) (before decide.Fields) {
	before = decide.Fields{
		Policy:     strings.Join(h[canonicalPolicy], ", "),
		RateLimit:  strings.Join(h[canonicalRateLimit], ", "),
		RetryAfter: strings.Join(h[canonicalRetryAfter], ", "),
	}
	f := decide.StackedFields(r.Context(), resp, before, res.Fields())
	if f.Policy != "" {
		h[canonicalPolicy] = []string{f.Policy}
		h[canonicalRateLimit] = []string{f.RateLimit}
	}
	if f.RetryAfter != "" {
		h[canonicalRetryAfter] = []string{f.RetryAfter}
	}
	if m.cfg.LegacyHeaders && res.DecidedBy() != nil {
		legacy(h, res.Decision)
	}
	return before
}

// legacy sets X-RateLimit-Limit, -Remaining and -Reset from d, unless a
// middleware further out set them from an admission closer to refusing.
func legacy(h http.Header, d sluice.Decision) {
	if n, err := strconv.ParseInt(h.Get("X-RateLimit-Remaining"), 10, 64); err == nil && d.Allowed && n <= d.Remaining {
		return
	}
	h.Set("X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(max(0, d.Remaining), 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(decide.Seconds(d.ResetAfter), 10))
}

// degraded reports whether the request was let through uncounted or any
// decision was made without the intended store.
func degraded(res *decide.Result) bool {
	if res.Outcome == decide.AdmittedUncounted {
		return true
	}
	for _, d := range res.Each {
		if d.Degraded {
			return true
		}
	}
	return false
}

// refuse answers a refused request: the Refused hook, the limit's Action,
// or a 429 problem document naming the limit.
func (m *middleware) refuse(w http.ResponseWriter, r *http.Request, res *decide.Result) {
	c := res.DecidedBy()
	if m.cfg.Refused != nil {
		m.cfg.Refused(w, r, res.Decision, c.Name)
		return
	}
	retry := max(1, decide.Seconds(res.RetryAfter()))
	if a := c.Action; a != nil && (a.Status != 0 || a.Body != nil) {
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
	problem.Write(w, http.StatusTooManyRequests, "Too Many Requests",
		fmt.Sprintf("Rate limit %q exceeded; retry in %d s.", c.Name, retry),
		map[string]any{"limit": c.Name, "retry_after": retry})
}

// unavailable refuses a request the limiter could not decide, with 503 and
// a Retry-After of err's RetryAfter() if it has one, else 1 s.
func unavailable(w http.ResponseWriter, err error) {
	retry := int64(1)
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) {
		retry = max(1, decide.Seconds(ra.RetryAfter()))
	}
	w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
	problem.Write(w, http.StatusServiceUnavailable, "Service Unavailable", "The rate limiter is unavailable.", nil)
}

var (
	canonicalPolicy     = http.CanonicalHeaderKey("RateLimit-Policy")
	canonicalRateLimit  = http.CanonicalHeaderKey("RateLimit")
	canonicalRetryAfter = http.CanonicalHeaderKey("Retry-After")
)
