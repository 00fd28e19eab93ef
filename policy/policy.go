// Package policy reads rate limiting rules from YAML, validates them
// strictly (every error names the file, line, rule, limit and field),
// compiles them, and applies them to HTTP requests through httplimit.
//
// A policy is a list of rules; a rule matches requests (methods, host and a
// path pattern in net/http ServeMux syntax), lists limits, and says what to
// do on refusal. Every limit of every matching rule is checked in one
// all-or-nothing sluice Check. docs/config.md documents the format with a
// complete example.
//
// A policy's jwt: section verifies the bearer token of each request
// (package jwtclaims): a limit can be keyed by a claim (jwt:sub) and an
// override can match one, and a token that does not verify has no claims.
// A rule's match, a key part and a cost can be CEL expressions over the
// request and those claims (match: {expr}, expr:'...'), compiled when the
// policy loads. The token is verified, and the expressions' input built,
// once per request, whatever the number of limits that read them.
//
// A limit's when: applies it only under a condition (Sentinel's
// strategies): while another limit, keyed for the same request, uses more
// than a share of its budget (when: {limit, above}: a decide.Relation,
// read with a peek Run makes and reuses briefly), or only to requests
// through an entry (when: {entry}: the trusted proxy's entry_header, the
// entry a Go middleware marked with sluice.WithEntry, else the first rule
// the request matched).
//
// A Holder keeps the current policy and swaps in a new one atomically on
// Reload; a policy that fails to load leaves the old one serving.
package policy

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/celexpr"
	"github.com/sluicehq/sluice/jwtclaims"
	"github.com/sluicehq/sluice/shed"
)

// Policy is a compiled policy. It is immutable and safe for concurrent use.
type Policy struct {
	// File is where the policy came from.
	File string
	// Rules in file order.
	Rules []*Rule
	// ClientIP resolves client addresses for ip keys.
	ClientIP *httplimit.ClientIP
	// Warnings are what loads but is likely not what was meant (an
	// override any client can claim), each naming the file and line;
	// sluice check prints them.
	Warnings []string
	// Shed is the shed: section, nil without one.
	Shed *Shed

	jwt         *jwtclaims.Verifier // the jwt: section's, nil without one
	exprs       bool                // some rule or limit has a CEL expression
	protected   []string            // see ProtectedHeaders
	prioritized bool                // some rule names a priority
	runtime     Runtime             // overrides set while sluice runs; nil without
	entryHeader string              // entry_header, canonical; "" without
	chains      bool                // some limit applies only through an entry
	bans        decide.BanIndex     // lists the bans the limits start; nil without
}

// Rule is one rule of a policy.
type Rule struct {
	Name   string
	Limits []*Limit
	// Action is what happens when one of its limits refuses.
	Action decide.Action
	// Shadow rules (action.refuse: shadow) count and report, never refuse.
	Shadow bool
	// OnError is the failure mode its action.on_error names;
	// sluice.FailDefault, the store's default, when it names none. Every
	// check the rule plans carries it (decide.Check.OnError).
	OnError sluice.FailureMode
	// Priority is the shedding priority of its requests (its priority:
	// option; see Policy.Priority).
	Priority    shed.Priority
	hasPriority bool
	// OneSlot (one_slot: true) keeps every key of the rule on one Redis
	// Cluster slot, named after the rule, so that a check of its limits is
	// one atomic script and one round trip (and can use quota leases)
	// instead of a charge per slot and a refund. It makes that slot as hot
	// as the rule; turning it on or off starts the rule's counts afresh
	// (its keys change names). Default false: keys spread over the
	// cluster. See Slot.
	OneSlot bool
	slot    string // Slot's answer
	match   *matcher
}

// Slot is the part of the store keys of r's checks that chooses their
// Redis Cluster slot (decide.Check.Slot, sluice.Request.Slot): with
// OneSlot, the rule's own part, which starts every key it plans; ""
// otherwise, for the whole key. An operation on a key of r that has no
// planned check (a reset, a release) takes it from here.
func (r *Rule) Slot() string { return r.slot }

// Match describes what the rule matches, as written ("POST api.example.com/orders/{id}").
func (r *Rule) Match() string { return r.match.describe }

// Limit is one limit of a rule.
type Limit struct {
	Name       string
	Limit      sluice.Limit
	key        []keyPart
	onMissing  missing
	missingKey []keyPart // the key of requests that lack a part of key
	cost       int64
	costHeader string
	maxCost    int64            // the largest cost costHeader may ask for; 0: the capacity
	late       *decide.LateCost // a cost the response reports; cost is then the reservation
	costExpr   *celexpr.Expr    // cost: expr:'...', nil without one
	overrides  []override
	soft       int64         // the soft share, in thousandths; 0: none
	ban        time.Duration // how long a key it refuses stays refused; 0: none
	when       *when         // when it applies; nil: always
}

// missing says what a limit does with a request that lacks a part of its
// key (no X-User-ID header, say).
type missing uint8

const (
	missingSkip     missing = iota // the limit does not apply (the default)
	missingRefuse                  // the request is refused with 400
	missingOtherKey                // it is counted under missingKey
)

// Late is the limit's cost known only after the response (cost:
// {reserve, response_header, ...}), nil when its cost is known up front.
func (l *Limit) Late() *decide.LateCost { return l.late }

// Key describes the limit's key as written ("header:X-User+ip").
func (l *Limit) Key() string {
	parts := make([]string, len(l.key))
	for i, p := range l.key {
		parts[i] = p.kind
		if p.name != "" {
			parts[i] += ":" + p.name
		}
	}
	return strings.Join(parts, "+")
}

// KeyNames returns the names of the parts of the limit's key, in the order
// their values appear in its store keys ("ip", "header:X-User"), and those
// of its on_missing key (nil without one): what a status page shows beside
// each value.
func (l *Limit) KeyNames() (key, onMissing []string) {
	names := func(ps []keyPart) []string {
		var out []string
		for _, p := range ps {
			n := p.kind
			if p.name != "" {
				n += ":" + p.name
			}
			out = append(out, n)
		}
		return out
	}
	return names(l.key), names(l.missingKey)
}

// keyPart is one element of a limit's key.
type keyPart struct {
	kind string // global, ip, route, method, host, header, query, cookie, jwt, expr, func
	name string // for header, query, cookie, jwt, expr (its source), func
	fn   httplimit.KeyFunc
	expr *celexpr.Expr
}

// override changes a limit for particular key values or requests.
type override struct {
	key            string // a key value, as computed
	header, equals string // or a request header's value
	claim          string // or a verified claim's value (equals)
	scale          float64
	unlimited      bool
	limit          sluice.Limit // the scaled limit
	grants         bool         // unlimited or scale above 1: more than the limit
	anyone         bool         // a header override honoured from any peer
}

// id names o among its limit's overrides, as decide.Check.Override:
// what it matches, which a reload that keeps the override keeps.
func (o *override) id() string {
	if o.key != "" {
		return "key=" + o.key
	}
	if o.claim != "" {
		return "claim:" + o.claim + "=" + o.equals
	}
	return "header:" + o.header + "=" + o.equals
}

// grant describes what an override grants, for warnings.
func (o override) grant() string {
	if o.unlimited {
		return "no limit"
	}
	return fmt.Sprintf("%g times the limit", o.scale)
}

// applies reports whether override o matches r: by the key value, or by
// a header, which grants more only when r came through a trusted proxy
// (a client can send any header it likes).
func (p *Policy) applies(o *override, r *http.Request, value string) bool {
	if o.key != "" {
		return o.key == value
	}
	if o.claim != "" {
		return claim(r, o.claim) == o.equals // verified claims only (withFacts)
	}
	if !o.anyone && !p.ClientIP.PeerTrusted(r) {
		return false
	}
	vs := r.Header.Values(o.header)
	return len(vs) == 1 && vs[0] == o.equals
}

// ProtectedHeaders are the request headers of overrides that grant more
// only through trusted proxies, the shed section's priority header and the
// entry_header: a gateway removes them from requests of other peers, so
// that the upstream never sees a value the policy did not honour.
func (p *Policy) ProtectedHeaders() []string { return p.protected }

func (p *Policy) protectedHeaders() []string {
	var hs []string
	for _, r := range p.Rules {
		for _, l := range r.Limits {
			for _, o := range l.overrides {
				if o.header != "" && !o.anyone && !slices.Contains(hs, o.header) {
					hs = append(hs, o.header)
				}
			}
		}
	}
	if p.Shed != nil && !slices.Contains(hs, p.Shed.PriorityHeader) {
		hs = append(hs, p.Shed.PriorityHeader) // honoured only from trusted proxies too
	}
	if p.entryHeader != "" && !slices.Contains(hs, p.entryHeader) {
		hs = append(hs, p.entryHeader) // likewise
	}
	return hs
}

// matcher matches requests with net/http's ServeMux patterns.
type matcher struct {
	mux      *http.ServeMux
	describe string
	expr     *celexpr.Expr // match.expr, nil without one
}

var found = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

// add registers a pattern, turning ServeMux's panic on a bad pattern into
// an error. The pattern's host is normalised as request hosts are (see
// Normalize), and a host with a port or a path that Normalize refuses is an
// error: the rule could never match.
func (m *matcher) add(pattern string) (err error) {
	if pattern, err = normalPattern(pattern); err != nil {
		return err
	}
	if m.mux == nil {
		m.mux = http.NewServeMux()
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	m.mux.Handle(pattern, found)
	return nil
}

// normalPattern returns a ServeMux pattern ("[METHOD ][HOST]/PATH") with
// its host in normal form and its path in lower case (but the names of its
// wildcards), as foldCase gives request paths.
func normalPattern(pattern string) (string, error) {
	method, rest, ok := strings.Cut(pattern, " ")
	if !ok {
		method, rest = "", pattern
	}
	host, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		host, path = rest[:i], rest[i:]
	}
	lower := strings.ToLower(path)
	if strings.ContainsAny(path, ";\\") || strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") {
		return "", errors.New(`a path with ";", a backslash, %2F or %5C never matches: requests with one are refused (400)`)
	}
	path = lowerOutsideBraces(path)
	if host == "" {
		if method != "" {
			return method + " " + path, nil
		}
		return path, nil
	}
	if _, port, err := splitHost(host); err != nil {
		return "", err
	} else if port != "" {
		return "", fmt.Errorf("host %q: rules ignore the port (write the name alone)", host)
	}
	h, _ := NormalizeHost(host)
	if method != "" {
		return method + " " + h + path, nil
	}
	return h + path, nil
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// lowerASCII lower-cases the ASCII letters of s and leaves every other
// byte as it is, so that a path and its escaped form stay one another's.
func lowerASCII(s string) string {
	if !hasUpper(s) {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// lowerOutsideBraces lower-cases the ASCII letters of a pattern's path
// outside its wildcards ("{ID}" keeps its name).
func lowerOutsideBraces(path string) string {
	b := []byte(path)
	depth := 0
	for i, c := range b {
		switch {
		case c == '{':
			depth++
		case c == '}':
			depth--
		case depth == 0 && 'A' <= c && c <= 'Z':
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// pattern returns the pattern that matches r, "" if none does. r's path
// is in lower case (foldCase), as the patterns are. A request ServeMux
// would redirect to add a trailing slash ("/api" under "/api/") matches:
// the upstream receives it as it is, so it is counted.
func (m *matcher) pattern(r *http.Request) string {
	_, pattern := m.mux.Handler(r)
	return pattern
}

// foldCase returns r with the ASCII letters of its path in lower case: rules
// match paths whatever their case, because many upstreams (Express,
// ASP.NET, anything on a case-insensitive file system) serve /API/x as
// /api/x. A rule that also counts a path a case-sensitive upstream would
// not serve costs that client quota; a rule that missed one a
// case-insensitive upstream does serve would let it through uncounted.
// The upstream receives the path as sent.
func foldCase(r *http.Request) *http.Request {
	if !hasUpper(r.URL.Path) && !hasUpper(r.URL.RawPath) {
		return r
	}
	u := *r.URL
	u.Path, u.RawPath = lowerASCII(u.Path), lowerASCII(u.RawPath)
	mr := new(http.Request)
	*mr = *r
	mr.URL = &u
	return mr
}

// Plan appends to dst the checks of every rule matching r, with their keys,
// costs, actions and failure modes: the policy as an httplimit.Source.
// Rules match, and keys are built from, r as Normalize returns it (method
// upper-cased, host lower-cased, path decoded and resolved, method
// overrides removed); a handler behind the middleware
// should serve that request too (sluice serve's gateway forwards it), not
// r. An error in what the client sent (a target Normalize refuses, a cost
// header that is not a whole number from 1 to the limit's capacity) is a
// *decide.ClientError, and no check is planned; a key that cannot be
// computed for another reason is a check with Err set, decided by its
// rule's on_error.
func (p *Policy) Plan(r *http.Request, dst []decide.Check) ([]decide.Check, error) {
	r, err := Normalize(r)
	if err != nil {
		return dst, err
	}
	q := planning{r: p.withFacts(r)} // the bearer token verified once for every limit
	q.mr = foldCase(q.r)             // what rules match
	for _, rule := range p.Rules {
		route := rule.match.pattern(q.mr)
		if route == "" || !rule.match.exprApplies(q.r) {
			continue
		}
		if !q.entered {
			if q.entry, err = p.entry(q.r, rule.Name); err != nil {
				return dst, err
			}
			q.entered = true
		}
		for _, l := range rule.Limits {
			c, ok, err := p.plan(&q, route, rule, l)
			if err != nil {
				return dst, err
			}
			if ok {
				dst = append(dst, c)
				if c.Ban != nil {
					dst = append(dst, decide.BanCheck(&c, banName(l)))
				}
			}
		}
	}
	return dst, nil
}

// planning is what Plan works out once per request.
type planning struct {
	r, mr   *http.Request // r normalised, with its facts; mr with its path folded
	entry   string        // the entry r came through (Policy.entry)
	entered bool          // entry is known
	buf     [128]byte
}

// plan plans one limit of a rule that matched the request with the
// pattern route. ok is false when the limit does not apply: it applies
// only through another entry, a key part has no value, or an override
// makes it unlimited.
func (p *Policy) plan(q *planning, route string, rule *Rule, l *Limit) (c decide.Check, ok bool, err error) {
	if l.when != nil && l.when.entry != "" && l.when.entry != q.entry {
		return c, false, nil
	}
	r := q.r
	if c, ok, err = p.planKey(r, route, rule, l, q.buf[:0]); !ok || err != nil || c.Err != nil {
		return c, ok, err
	}
	if l.when != nil && l.when.related != nil {
		c.When = p.relation(r, q.mr, l.when)
	}
	c.Cost, c.Late, c.Soft = l.cost, l.late, l.soft
	if l.costHeader != "" {
		most := c.Limit.Capacity()
		if l.maxCost > 0 {
			most = min(most, l.maxCost)
		}
		if c.Cost, err = headerCost(r, l.costHeader, most); err != nil {
			ce, ok := decide.AsClientError(err)
			if !ok {
				ce = &decide.ClientError{Field: "header " + l.costHeader, Reason: err.Error()}
			}
			ce.Limit = l.Name
			return c, false, ce
		}
	}
	if l.costExpr != nil {
		if c.Cost, err = exprCost(r, l.costExpr, c.Limit.Capacity()); err != nil {
			return c, false, &decide.ClientError{Limit: l.Name, Field: "cost", Reason: err.Error()}
		}
	}
	return c, true, nil
}

// planKey plans the key and the limit of one limit of a rule for r, which
// matched the pattern route ("" when r matched none of the rule's): the
// check without its cost. ok is false when the limit does not apply (a key
// part has no value, an override makes it unlimited); a key that cannot
// be computed for a reason not the client's is a check with Err set.
func (p *Policy) planKey(r *http.Request, route string, rule *Rule, l *Limit, buf []byte) (c decide.Check, ok bool, err error) {
	c = decide.Check{Name: l.Name, Slot: rule.slot, Limit: l.Limit, Shadow: rule.Shadow, OnError: rule.OnError, Action: &rule.Action}
	key, value, skip, err := p.key(r, route, rule, l, l.key, buf)
	if skip && l.onMissing != missingSkip {
		if l.onMissing == missingRefuse {
			return c, false, &decide.ClientError{Limit: l.Name, Field: "key " + l.Key(), Reason: "missing, and the limit refuses requests without it"}
		}
		// Counted under the other key: an empty part first keeps these
		// keys apart from those of requests that have every part.
		buf = decide.AppendKey(buf[:0], rule.Name, l.Name, "")
		key, value, skip, err = p.key(r, route, rule, l, l.missingKey, buf)
		if skip {
			return c, false, &decide.ClientError{Limit: l.Name, Field: "key " + l.Key(), Reason: "missing, and so is a part of the limit's on_missing key"}
		}
	}
	if ce, ok := decide.AsClientError(err); ok {
		ce.Limit = l.Name
		return c, false, ce
	}
	if err != nil {
		c.Err = fmt.Errorf("rule %q: key: %w", rule.Name, err)
		return c, true, nil
	}
	if skip {
		return c, false, nil
	}
	c.Key = string(key)
	c.Ban = p.banOf(rule, l, c.Key)
	if _, unlimited := decide.ApplyRuntime(p.runtime, &c, l.Name, value, l.Limit); unlimited {
		return c, false, nil
	}
	for i := 0; i < len(l.overrides) && c.Override == ""; i++ {
		if o := &l.overrides[i]; p.applies(o, r, value) {
			if o.unlimited {
				return c, false, nil
			}
			c.Limit, c.Override = o.limit, o.id()
		}
	}
	return c, true, nil
}

// key builds the store key of a request under one limit with
// decide.AppendKey: the rule and limit names (unless b already starts the
// key), then the value of each of parts, each bounded and length-prefixed, so that no two different requests
// share a key by accident and a key is at most a few hundred bytes per part
// whatever the request carries. value is the parts' values joined by "+",
// for overrides by key value, when the limit has such overrides. skip is
// true when a part has no value (a missing header: the limit does not
// apply).
func (p *Policy) key(r *http.Request, route string, rule *Rule, l *Limit, parts []keyPart, b []byte) (key []byte, value string, skip bool, err error) {
	if len(b) == 0 {
		b = decide.AppendKey(b, rule.Name, l.Name)
	}
	for _, part := range parts {
		v, err := p.part(r, route, part)
		if err != nil {
			return nil, "", false, err
		}
		if v == "" {
			return nil, "", true, nil
		}
		v = decide.KeyValue(v) // long values become a fixed-size digest
		b = decide.AppendKeyPart(b, v)
		if p.wantsValue(l) {
			if value != "" {
				value += "+"
			}
			value += v
		}
	}
	return b, value, false, nil
}

// part returns the value of one key part for r, which matched the pattern
// route ("" when it has none).
func (p *Policy) part(r *http.Request, route string, part keyPart) (string, error) {
	switch part.kind {
	case "global":
		return "*", nil
	case "ip":
		return p.ClientIP.Key(r)
	case "route":
		return route, nil
	case "method":
		return r.Method, nil
	case "host":
		return hostname(r.Host), nil
	case "header":
		return httplimit.HeaderValue(r, part.name)
	case "query":
		return query(r, part.name)
	case "cookie":
		return cookie(r, part.name)
	case "jwt":
		return claim(r, part.name), nil
	case "expr":
		return exprPart(r, part.expr), nil
	case "func":
		return part.fn(r)
	}
	return "", fmt.Errorf("unknown key part %q", part.kind)
}

// headerCost reads a request's cost from a header: absent, it is 1;
// present, it must be sent once and be a whole number from 1 to most (the
// limit's max_cost, or its capacity),
// written in plain digits. A client may not peek (0), charge less than
// nothing, or name a cost twice.
func headerCost(r *http.Request, header string, most int64) (int64, error) {
	s, err := httplimit.HeaderValue(r, header) // sent twice, or as X_Cost: the client's error
	if err != nil {
		return 0, err
	}
	if s == "" && len(r.Header.Values(header)) == 0 {
		return 1, nil
	}
	c, err := strconv.ParseInt(s, 10, 64)
	if err != nil || c < 1 || c > most || s == "" || s[0] < '0' || s[0] > '9' {
		return 0, &decide.ClientError{Field: "header " + header, Reason: fmt.Sprintf("%.40q is not a whole number from 1 to %d", s, most)}
	}
	return c, nil
}

// query returns the value of a query parameter a key is made of. A query
// string that does not parse (bad percent-encoding, ';' separators) or that
// names the parameter twice is the client's error, as for headers: Go's
// parser drops what it cannot read, and an upstream may read otherwise.
func query(r *http.Request, name string) (string, error) {
	vs, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "", &decide.ClientError{Field: "query", Reason: fmt.Sprintf("does not parse (%v)", err)}
	}
	switch v := vs[name]; len(v) {
	case 0:
		return "", nil
	case 1:
		return v[0], nil
	default:
		return "", &decide.ClientError{Field: "query " + name, Reason: fmt.Sprintf("sent %d times; a parameter a rate limit key is made of must be sent once", len(v))}
	}
}

// cookie returns the value of a cookie a key is made of, as the client
// sent it (one pair of double quotes around it dropped), however strict
// parsers would judge it: a value they reject is still counted, never
// taken for an absent cookie. A cookie sent twice is the client's error.
func cookie(r *http.Request, name string) (string, error) {
	var value string
	n := 0
	for _, line := range r.Header["Cookie"] {
		for pair := range strings.SplitSeq(line, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if !ok || k != name {
				continue
			}
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			value, n = v, n+1
		}
	}
	if n > 1 {
		return "", &decide.ClientError{Field: "cookie " + name, Reason: fmt.Sprintf("sent %d times; a cookie a rate limit key is made of must be sent once", n)}
	}
	return value, nil
}
