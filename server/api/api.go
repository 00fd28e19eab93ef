package api

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/httpname"
	"github.com/sluicehq/sluice/internal/problem"
	"github.com/sluicehq/sluice/internal/yamlload"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server/internal/snapshot"
	"github.com/sluicehq/sluice/server/keyview"
	"github.com/sluicehq/sluice/shed"
)

// Bounds of the decision API: nothing a caller sends can make the server
// hold more than this per request.
const (
	maxAPIBody   = 64 << 10
	maxAPIChecks = 32
	maxAPIKey    = 512
)

// checkRequest is the body of POST /v1/check: either a request to plan
// under the policy (optionally only one rule of it), or explicit checks.
type checkRequest struct {
	Rule    string          `json:"rule,omitempty"`
	Request *apiRequest     `json:"request,omitempty"`
	Checks  []explicitCheck `json:"checks,omitempty"`
	// Hits is charged per request (policy mode) or per check without
	// its own; absent means 1, 0 peeks.
	Hits *int64 `json:"hits,omitempty"`
	// LLM is what an LLM call asks for, for the limits that count its
	// tokens (policy mode).
	LLM *llmFields `json:"llm,omitempty"`
}

// apiRequest describes an HTTP request for the policy to plan.
type apiRequest struct {
	Method  string            `json:"method"`
	Host    string            `json:"host"`
	Path    string            `json:"path"`
	Query   string            `json:"query"` // raw query string, without '?'
	IP      string            `json:"ip"`    // the client's address
	Headers map[string]string `json:"headers"`
	Cookies map[string]string `json:"cookies"`
}

// explicitCheck is one check with its key and limit given by the caller.
type explicitCheck struct {
	Name  string          `json:"name,omitempty"`
	Key   string          `json:"key"`
	Limit json.RawMessage `json:"limit"`
	Hits  *int64          `json:"hits,omitempty"`
	// SettleMax makes hits a reservation that /v1/settle replaces with
	// the actual cost, at most SettleMax.
	SettleMax *int64 `json:"settle_max,omitempty"`
}

// checkResponse is the answer: the decision and what to send the client.
type checkResponse struct {
	Allowed bool `json:"allowed"`
	// Status is what an HTTP service should answer: 200 when allowed, the
	// deciding limit's refusal status (429 unless the policy says
	// otherwise) when not.
	Status       int           `json:"status"`
	Limit        string        `json:"limit,omitempty"`
	RetryAfterMs int64         `json:"retry_after_ms"`
	DelayMs      int64         `json:"delay_ms"`
	Degraded     bool          `json:"degraded"`
	Decisions    []apiDecision `json:"decisions"`
	// Idle names the limits that were neither checked nor charged
	// because the limit they relate to was not busy (when: {limit}).
	Idle    []string          `json:"idle,omitempty"`
	Headers map[string]string `json:"headers"`
	// SettleToken, for an admitted request that reserved a cost known
	// only after the work, settles it: POST /v1/settle.
	SettleToken string `json:"settle_token,omitempty"`
}

// apiDecision is one limit's decision. Key is the store key, opaque: give
// it back to /v1/release. Rule, KeyParts, Values and Spec say what it is
// made of: the values are those the request carried (the caller sent
// them, so they are shown in clear; a value longer than
// decide.MaxKeyValue as the digest the key holds), one per part of the
// limit's key, in order, as sluice keys inspect and reset take them.
type apiDecision struct {
	Rule         string   `json:"rule,omitempty"`
	Name         string   `json:"name"`
	Spec         string   `json:"spec"`
	KeyParts     []string `json:"key_parts"`
	Values       []string `json:"values"`
	OnMissing    bool     `json:"on_missing,omitempty"`
	Key          string   `json:"key"`
	Shadow       bool     `json:"shadow,omitempty"`
	Allowed      bool     `json:"allowed"`
	Limit        int64    `json:"limit"`
	Remaining    int64    `json:"remaining"`
	RetryAfterMs int64    `json:"retry_after_ms"`
	ResetAfterMs int64    `json:"reset_after_ms"`
	DelayMs      int64    `json:"delay_ms"`
	Lease        uint64   `json:"lease,omitempty"`
}

// releaseRequest is the body of POST /v1/release: a concurrency lease to
// give back, with the key /v1/check returned and either the policy limit's
// name or the explicit limit.
type releaseRequest struct {
	Key   string          `json:"key"`
	Name  string          `json:"name,omitempty"`
	Limit json.RawMessage `json:"limit,omitempty"`
	Lease uint64          `json:"lease"`
}

// explicitPrefix starts the store keys of explicit checks: decide.AppendKey
// of an empty part and "api", which no policy key and no RLS key starts
// with.
var explicitPrefix = string(decide.AppendKey(nil, "", "api"))

func ms(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// Config is what the decision API needs. Limiter and Policy are required;
// the other funcs may be nil.
type Config struct {
	// Limiter decides the checks.
	Limiter *sluice.Limiter
	// Policy returns the policy in force. The API calls it once per
	// request (package snapshot): a request is planned, answered, released
	// or settled under the policy in force when it arrived.
	Policy func() *policy.Policy
	// Keys shows store keys in answers and logs.
	Keys keyview.Shower
	// MaxDelay is the longest shaping delay a check may be given.
	MaxDelay time.Duration
	// SettleTTL and SettleSecretFile: see the server's Config.
	SettleTTL        time.Duration
	SettleSecretFile string
	Logger           *slog.Logger
	// Observe counts a decision; Settled a settle of a cost.
	Observe func(decide.Observation)
	Settled func(limit string, actual int64, found, capped bool, err error)
}

// API is the decision API: POST /v1/check, /v1/release and /v1/settle
// (docs/api.md). It is safe for concurrent use.
type API struct {
	cfg     Config
	dc      *decide.Decider
	limits  limitCache    // explicit limits, parsed
	settle  *settleTokens // settle tokens
	lastErr atomic.Int64  // when a store error was last logged (Unix s)
}

// New returns the decision API of cfg.
func New(cfg Config) (*API, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Observe == nil {
		cfg.Observe = func(decide.Observation) {}
	}
	if cfg.Settled == nil {
		cfg.Settled = func(string, int64, bool, bool, error) {}
	}
	ap := &API{cfg: cfg}
	var err error
	if ap.settle, err = newSettleTokens(cfg.SettleTTL, cfg.SettleSecretFile); err != nil {
		return nil, err
	}
	// The decision API answers a store error with 503 and lets its caller
	// choose (a store behind failover has already applied each rule's
	// on_error); it never sleeps: delays go back to the caller.
	ap.dc, err = decide.New(cfg.Limiter, decide.Config{
		OnError: sluice.FailClosed, MaxDelay: cfg.MaxDelay, Component: "decision API", Logger: cfg.Logger,
		ShowKeys: cfg.Keys.Show, KeyText: cfg.Keys.Key,
	})
	if err != nil {
		return nil, err
	}
	return ap, nil
}

func (ap *API) logError(err error) {
	if now := time.Now().Unix(); ap.lastErr.Swap(now) != now {
		ap.cfg.Logger.Warn("decision API: the store failed", "err", err)
	}
}

// Priority is the shedding priority of a decision API request under p:
// the shed section's priority header, from a trusted proxy only.
func Priority(p *policy.Policy, r *http.Request) shed.Priority {
	if p.Shed == nil {
		return shed.Default
	}
	if vs := r.Header[p.Shed.PriorityHeader]; len(vs) == 1 && p.ClientIP.PeerTrusted(r) {
		prio, _ := shed.ParsePriority(vs[0]) // Default when it is not one
		return prio
	}
	return shed.Default
}

// Handler serves the decision API's endpoints.
func (ap *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", ap.check)
	mux.HandleFunc("POST /v1/release", ap.release)
	mux.HandleFunc("POST /v1/settle", ap.settleHandler)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/check" || r.URL.Path == "/v1/release" || r.URL.Path == "/v1/settle" {
			w.Header().Set("Allow", "POST")
			problem.Write(w, http.StatusMethodNotAllowed, "Method Not Allowed", r.URL.Path+" takes POST with a JSON body (docs/api.md).", nil)
			return
		}
		problem.Write(w, http.StatusNotFound, "Not Found", "The decision API has POST /v1/check, POST /v1/settle and POST /v1/release (docs/api.md).", nil)
	})
	return snapshot.Serving(ap.cfg.Policy, mux)
}

// decode reads a JSON body into v, strictly and bounded. The body must be
// valid UTF-8 without escapes of lone surrogates: encoding/json would turn
// every invalid sequence into U+FFFD, and two different keys into one.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAPIBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fmt.Errorf("body larger than %d bytes", maxAPIBody)
		}
		return fmt.Errorf("body: %v", err)
	}
	if err := checkUTF8(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("body: %v", err)
	}
	if dec.More() {
		return errors.New("body: more than one JSON value")
	}
	return nil
}

// checkUTF8 refuses a body that is not valid UTF-8 or escapes a lone
// surrogate ("\ud800"): JSON decoding replaces either with U+FFFD, so the
// keys of two different values would meet.
func checkUTF8(body []byte) error {
	if !utf8.Valid(body) {
		i := 0
		for i < len(body) {
			r, n := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return fmt.Errorf("body: not valid UTF-8 (byte %d)", i)
	}
	for i := 0; i+1 < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		if body[i+1] != 'u' {
			i++ // an escaped character: skip it ("\\u" is a backslash and a u)
			continue
		}
		hi, ok := hex4(body[i+2:])
		if !ok || hi < 0xd800 || hi > 0xdfff {
			continue
		}
		if !lowSurrogate(hi, body[i+6:]) {
			return fmt.Errorf("body: \\u%04x at byte %d is half of a UTF-16 surrogate pair", hi, i)
		}
		i += 11
	}
	return nil
}

// lowSurrogate reports whether hi is a high surrogate and b starts with the
// escape of a low one, completing the pair.
func lowSurrogate(hi rune, b []byte) bool {
	if hi >= 0xdc00 || len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return false
	}
	lo, ok := hex4(b[2:])
	return ok && lo >= 0xdc00 && lo <= 0xdfff
}

// hex4 reads four hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

func (ap *API) check(w http.ResponseWriter, r *http.Request) {
	var req checkRequest
	if err := decode(w, r, &req); err != nil {
		problem.Write(w, http.StatusBadRequest, "Bad Request", err.Error(), nil)
		return
	}
	p := snapshot.Of(r)
	checks, err := ap.planAPI(p, &req)
	if err != nil {
		problem.Write(w, http.StatusBadRequest, "Bad Request", err.Error(), nil)
		return
	}
	var res decide.Result
	ap.dc.Run(r.Context(), checks, &res)
	for _, o := range res.Observed {
		if len(req.Checks) > 0 {
			o.Limit = "explicit" // names chosen by callers: unbounded
		}
		ap.cfg.Observe(o)
	}
	switch res.Outcome {
	case decide.Invalid:
		problem.Write(w, http.StatusBadRequest, "Bad Request", res.Err.Error(), nil)
		return
	case decide.Failed:
		ap.logError(res.Err)
		problem.Write(w, http.StatusServiceUnavailable, "Service Unavailable", "The store could not decide: "+res.Err.Error(), nil)
		return
	}
	resp := apiAnswer(&res, ap.cfg.Keys.Under(p))
	if res.Late() {
		resp.SettleToken = ap.settle.issue(settleEntries(&res, len(req.Checks) > 0))
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// apiAnswer is the JSON answer to a decided check; keys splits its keys.
func apiAnswer(res *decide.Result, keys keyview.Shower) checkResponse {
	resp := checkResponse{Allowed: res.Proceed(), Status: http.StatusOK, Degraded: res.Outcome == decide.AdmittedUncounted,
		Decisions: []apiDecision{}, Headers: map[string]string{}}
	add := func(cs []decide.Check, ds []sluice.Decision, shadow bool) {
		for i, c := range cs {
			var d sluice.Decision
			if i < len(ds) {
				d = ds[i]
			}
			kv, _ := keys.View(c.Key)
			resp.Decisions = append(resp.Decisions, apiDecision{
				Rule: kv.Rule, Name: c.Name, Spec: c.Limit.String(), KeyParts: nonNil(kv.Names), Values: nonNil(kv.Values),
				OnMissing: kv.OnMissing, Key: c.Key, Shadow: shadow, Allowed: d.Allowed,
				Limit: d.Limit, Remaining: max(0, d.Remaining),
				RetryAfterMs: ms(d.RetryAfter), ResetAfterMs: ms(d.ResetAfter),
				DelayMs: ms(d.Delay), Lease: d.Lease,
			})
		}
	}
	add(res.Enforced, res.Each, false)
	add(res.Shadow, res.ShadowEach, true)
	for _, c := range res.Idle {
		resp.Idle = append(resp.Idle, c.Name)
	}
	if c := res.DecidedBy(); c != nil {
		resp.Limit = c.Name
		resp.Degraded = resp.Degraded || res.Decision.Degraded
		resp.RetryAfterMs, resp.DelayMs = ms(res.RetryAfter()), ms(res.Decision.Delay)
		if res.Outcome == decide.Refused {
			resp.Status = http.StatusTooManyRequests
			if c.Action != nil && c.Action.Status != 0 {
				resp.Status = c.Action.Status
			}
		}
	}
	f := res.Fields()
	for name, v := range map[string]string{"RateLimit-Policy": f.Policy, "RateLimit": f.RateLimit, "Retry-After": f.RetryAfter} {
		if v != "" {
			resp.Headers[name] = v
		}
	}
	return resp
}

// nonNil is ss, or an empty list: JSON arrays, never null.
func nonNil(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}

// planAPI plans req under p.
func (ap *API) planAPI(p *policy.Policy, req *checkRequest) ([]decide.Check, error) {
	hits := int64(1)
	if req.Hits != nil {
		hits = *req.Hits
		if hits < 0 {
			return nil, errors.New("hits: must not be negative (0 peeks)")
		}
	}
	switch {
	case req.Request != nil && len(req.Checks) > 0:
		return nil, errors.New("give request (to apply the policy) or checks (explicit keys and limits), not both")
	case req.Request != nil:
		planned, err := planPolicy(p, req, hits)
		if err == nil && hits != 0 {
			err = reserveLLM(planned, req.LLM, hits)
		}
		return planned, err
	case len(req.Checks) > 0:
		if req.Rule != "" {
			return nil, errors.New("rule: only with request (explicit checks name their own limits)")
		}
		return ap.limits.planExplicit(p, req.Checks, hits)
	}
	return nil, errors.New(`give request (to apply the policy) or checks (explicit keys and limits), for example {"request": {"method": "GET", "path": "/", "ip": "203.0.113.7"}}`)
}

// planPolicy plans the request req describes under p.
func planPolicy(p *policy.Policy, req *checkRequest, hits int64) ([]decide.Check, error) {
	a := req.Request
	hr, err := apiHTTPRequest(a)
	if err != nil {
		return nil, err
	}
	planned, err := p.Plan(hr, nil) // host and path normalised as the gateway's
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	for _, c := range planned {
		if errors.Is(c.Err, httplimit.ErrNoClientIP) && a.IP == "" {
			return nil, fmt.Errorf("request.ip: missing, and a limit keyed by ip applies (%q)", c.Name)
		}
	}
	if req.Rule != "" {
		if planned, err = onlyRule(p, planned, req.Rule); err != nil {
			return nil, err
		}
	}
	for i := range planned {
		c := planned[i].Cost * hits
		if hits != 0 && c/hits != planned[i].Cost || c > planned[i].Limit.Capacity() {
			return nil, fmt.Errorf("hits: %d × cost %d exceeds the capacity %d of limit %q", hits, planned[i].Cost, planned[i].Limit.Capacity(), planned[i].Name)
		}
		planned[i].Cost = c
		if hits == 0 {
			planned[i].Late = nil // a peek reserves nothing to settle
		} else if hits > 1 && planned[i].Late != nil {
			planned[i].Late = hitsLate(planned[i].Late, hits, c, planned[i].Limit)
		}
	}
	return planned, nil
}

// apiHTTPRequest builds the HTTP request a decision API request describes,
// for the policy to plan.
func apiHTTPRequest(a *apiRequest) (*http.Request, error) {
	method := cmp.Or(a.Method, http.MethodGet)
	if !httpname.Valid(method) {
		return nil, fmt.Errorf("request.method: %q is not an HTTP method", a.Method)
	}
	path := cmp.Or(a.Path, "/")
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("request.path: %q must start with /", a.Path)
	}
	host := cmp.Or(a.Host, "localhost")
	u, err := url.Parse("http://" + host + path)
	if err != nil || u.Host == "" || u.Path != path && u.RawPath != path {
		return nil, fmt.Errorf("request.host/path: %q %q do not form a URL", a.Host, a.Path)
	}
	u.RawQuery = a.Query
	hr := &http.Request{Method: method, URL: u, Host: host, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	if err := apiHeaders(hr, a); err != nil {
		return nil, err
	}
	// request.ip is the client's address, already resolved: forwarding
	// headers the caller passes on must not resolve it again, even when it
	// falls in trusted_proxies.
	for _, h := range []string{"X-Forwarded-For", "Forwarded", "X-Real-Ip"} {
		hr.Header.Del(h)
	}
	if a.IP != "" {
		ip, err := netip.ParseAddr(a.IP)
		if err != nil {
			return nil, fmt.Errorf("request.ip: %q is not an IP address", a.IP)
		}
		hr.RemoteAddr = netip.AddrPortFrom(ip, 0).String()
	}
	return hr, nil
}

// onlyRule keeps the checks of planned that belong to the rule named name.
func onlyRule(p *policy.Policy, planned []decide.Check, name string) ([]decide.Check, error) {
	var rule *policy.Rule
	for _, ru := range p.Rules {
		if ru.Name == name {
			rule = ru
		}
	}
	if rule == nil {
		return nil, fmt.Errorf("rule: %q is not a rule of the policy %s", name, p.File)
	}
	kept := planned[:0]
	for _, pl := range planned {
		for _, l := range rule.Limits {
			if l.Name == pl.Name {
				kept = append(kept, pl)
			}
		}
	}
	return kept, nil
}

// apiHeaders sets the headers and cookies of a decision API request on hr,
// refusing what an HTTP request could not carry as it is: a header named
// twice (in two cases), a control byte in a value, a cookie whose value
// the Cookie header would change. Each would let two different values
// meet under one key, or a value be counted that no server would read.
func apiHeaders(hr *http.Request, a *apiRequest) error {
	names := make(map[string]string, len(a.Headers))
	for k, v := range a.Headers {
		if !httpname.Valid(k) {
			return fmt.Errorf("request.headers: %q is not a header name", k)
		}
		ck := http.CanonicalHeaderKey(k)
		if other, dup := names[ck]; dup {
			return fmt.Errorf("request.headers: %q and %q name one header; send it once", other, k)
		}
		names[ck] = k
		if !validFieldValue(v) {
			return fmt.Errorf("request.headers: the value of %q holds a control byte", k)
		}
		hr.Header.Set(k, v)
	}
	for k, v := range a.Cookies {
		if !httpname.Valid(k) {
			return fmt.Errorf("request.cookies: %q is not a cookie name", k)
		}
		hr.AddCookie(&http.Cookie{Name: k, Value: v, Quoted: false})
	}
	for k, v := range a.Cookies {
		if c, err := hr.Cookie(k); err != nil || c.Value != v {
			return fmt.Errorf("request.cookies: the value of %q is not a cookie value (no control bytes, quotes, ';' or '\\')", k)
		}
	}
	return nil
}

// validFieldValue reports whether v can be sent as a header field's value:
// no control bytes but horizontal tab.
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func (lc *limitCache) planExplicit(p *policy.Policy, checks []explicitCheck, hits int64) ([]decide.Check, error) {
	if len(checks) > maxAPIChecks {
		return nil, fmt.Errorf("checks: %d, more than %d", len(checks), maxAPIChecks)
	}
	var planned []decide.Check
	var errs []error
	for i, c := range checks {
		field := "checks[" + strconv.Itoa(i) + "]"
		if c.Key == "" || len(c.Key) > maxAPIKey {
			errs = append(errs, fmt.Errorf("%s.key: must be 1 to %d bytes (got %d)", field, maxAPIKey, len(c.Key)))
			continue
		}
		if len(c.Limit) == 0 {
			errs = append(errs, fmt.Errorf(`%s.limit: missing, for example {"algorithm": "token_bucket", "rate": "10/s", "burst": 20}`, field))
			continue
		}
		lim, err := lc.parse(field+".limit", c.Limit)
		if err != nil {
			errs = append(errs, limitError(err))
			continue
		}
		name := c.Name
		if name == "" {
			name = "check-" + strconv.Itoa(i)
		}
		if len(name) > 64 || !printableASCII(name) {
			errs = append(errs, fmt.Errorf("%s.name: at most 64 printable ASCII characters", field))
			continue
		}
		// Named after a limit of the policy, the check takes that limit's
		// runtime overrides for its key, over the limit it gave.
		pc := decide.Check{Name: name, Limit: lim}
		if p.ApplyRuntime(&pc, c.Key) {
			continue
		}
		lim = pc.Limit
		cost := hits
		if c.Hits != nil {
			cost = *c.Hits
		}
		if cost < 0 || cost > lim.Capacity() {
			errs = append(errs, fmt.Errorf("%s.hits: must be between 0 and the limit's capacity %d (got %d)", field, lim.Capacity(), cost))
			continue
		}
		key := explicitPrefix + string(decide.AppendKeyPart(nil, c.Key))
		for _, p := range planned {
			if p.Key == key && p.Limit.Shares(lim) {
				errs = append(errs, fmt.Errorf("%s: the same key as check %q under a limit that shares its state (the same algorithm and version); merge the two into one check with the summed hits, or give one limit another version", field, p.Name))
			}
		}
		late, err := settleMax(field, c.SettleMax, cost, lim)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		planned = append(planned, decide.Check{Name: name, Key: key, Limit: lim, Cost: cost, Late: late, Override: pc.Override})
	}
	return planned, errors.Join(errs...)
}

func (ap *API) release(w http.ResponseWriter, r *http.Request) {
	var req releaseRequest
	if err := decode(w, r, &req); err != nil {
		problem.Write(w, http.StatusBadRequest, "Bad Request", err.Error(), nil)
		return
	}
	var lim sluice.Limit
	slot := "" // an explicit limit's key has none
	switch {
	case req.Key == "" || len(req.Key) > 4*maxAPIKey:
		problem.Write(w, http.StatusBadRequest, "Bad Request", "key: the key /v1/check returned is required", nil)
		return
	case req.Lease == 0:
		problem.Write(w, http.StatusBadRequest, "Bad Request", "lease: the lease /v1/check returned is required", nil)
		return
	case (req.Name == "") == (len(req.Limit) == 0):
		problem.Write(w, http.StatusBadRequest, "Bad Request", "give name (a policy limit) or limit (an explicit one)", nil)
		return
	case req.Name != "":
		found := false
		for _, ru := range snapshot.Of(r).Rules {
			for _, l := range ru.Limits {
				if l.Name == req.Name {
					lim, slot, found = l.Limit, ru.Slot(), true // the key's slot is its rule's
				}
			}
		}
		if !found {
			problem.Write(w, http.StatusBadRequest, "Bad Request", fmt.Sprintf("name: %q is not a limit of the policy", req.Name), nil)
			return
		}
	default:
		var err error
		if lim, err = policy.ParseLimit("limit", req.Limit); err != nil {
			problem.Write(w, http.StatusBadRequest, "Bad Request", limitError(err).Error(), nil)
			return
		}
	}
	if !algo.Leases(lim.Algorithm) {
		problem.Write(w, http.StatusBadRequest, "Bad Request", "only concurrency limits hold leases", nil)
		return
	}
	if err := ap.cfg.Limiter.Release(r.Context(), sluice.Request{Key: req.Key, Slot: slot, Limit: lim}, req.Lease); err != nil {
		ap.logError(err)
		problem.Write(w, http.StatusServiceUnavailable, "Service Unavailable", "The store could not release: "+err.Error(), nil)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// headerNames spells the header fields of an answer as their specification
// does, rather than in Go's canonical form ("Ratelimit-Policy").
var headerNames = map[string]string{
	"Ratelimit-Policy": "RateLimit-Policy",
	"Ratelimit":        "RateLimit",
	"Retry-After":      "Retry-After",
}

// limitCache remembers the limits explicit checks wrote, by their JSON:
// callers send the same few limits over and over, and parsing one (YAML
// rules, strict validation) cost more than the rest of a check. Bounded:
// it is emptied when full.
type limitCache struct {
	mu sync.Mutex
	m  map[string]sluice.Limit
}

const maxCachedLimits = 4096

func (lc *limitCache) parse(field string, raw []byte) (sluice.Limit, error) {
	lc.mu.Lock()
	lim, ok := lc.m[string(raw)]
	lc.mu.Unlock()
	if ok {
		return lim, nil
	}
	lim, err := policy.ParseLimit(field, raw)
	if err != nil {
		return lim, err
	}
	lc.mu.Lock()
	if lc.m == nil || len(lc.m) >= maxCachedLimits {
		lc.m = map[string]sluice.Limit{}
	}
	lc.m[string(raw)] = lim
	lc.mu.Unlock()
	return lim, nil
}

// limitError lists the errors of ParseLimit, one per line, without
// policy's "invalid" prefix: the API's answer already says the request was
// bad.
func limitError(err error) error { return yamlload.Join(err, policy.Errors(err)) }

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
