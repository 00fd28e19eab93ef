package policy

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/celexpr"
	"github.com/sluicehq/sluice/internal/yamlload"
	"go.yaml.in/yaml/v3"
)

// Options are what a policy file can refer to but not contain.
type Options struct {
	// Funcs are key functions a limit can name as key: func:NAME.
	Funcs map[string]httplimit.KeyFunc

	// MaxDelay is the longest shaping delay the front-end waits
	// (httplimit.Config.MaxDelay, sluice serve --max-delay) for rules
	// without refuse: delay, whose bound is their action.max_delay. A
	// leaky_bucket whose full queue would wait longer is an error. Default
	// (zero): 1s, httplimit's default.
	MaxDelay time.Duration

	// Runtime, if set, is the table of overrides set while sluice runs
	// (sluice serve's PUT /admin/overrides), consulted before the file's
	// own overrides. Default none.
	Runtime Runtime

	// Bans, if set, lists the bans the policy's limits start
	// (decide.Ban.Index): sluice serve's index of bans, for GET
	// /admin/bans. Default none.
	Bans decide.BanIndex

	// Logger receives what the policy's parts log while it is in force:
	// the jwt: section's key set reloads and failed fetches. Default
	// slog.Default().
	Logger *slog.Logger
}

// ErrInvalid wraps every error of a policy that does not load.
var ErrInvalid = errors.New("policy: invalid")

// maxFileSize bounds a policy file, so a mistaken path (a log, a device)
// fails fast instead of filling memory.
const maxFileSize = 4 << 20

// Load reads and compiles the policy file at path.
func Load(path string, opts Options) (*Policy, error) {
	p, _, err := load(path, opts)
	return p, err
}

// load is Load, and also returns the files of prices the policy names
// (cost.prices_file), those it names even when it does not load.
func load(path string, opts Options) (*Policy, []string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, fmt.Errorf("policy: %w", err)
	}
	if st.Size() > maxFileSize {
		return nil, nil, invalid("\n", &Error{File: path, Msg: fmt.Sprintf("%d bytes, larger than %d", st.Size(), maxFileSize)})
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("policy: %w", err)
	}
	return parse(path, data, opts)
}

// Parse compiles a policy from YAML; file names it in errors. Every error
// is reported: the error wraps ErrInvalid and joins one *Error per problem
// (Errors lists them), each naming the file, line, rule, limit and field.
func Parse(file string, data []byte, opts Options) (*Policy, error) {
	p, _, err := parse(file, data, opts)
	return p, err
}

// parse is Parse, and also returns the files of prices the policy names,
// as load does.
func parse(file string, data []byte, opts Options) (*Policy, []string, error) {
	if len(data) > maxFileSize {
		return nil, nil, invalid("\n", &Error{File: file, Msg: fmt.Sprintf("%d bytes, larger than %d", len(data), maxFileSize)})
	}
	l := newLoader(file, opts)
	var p *Policy
	if doc, ok := l.decode(data, "a policy is one document"); ok {
		p = l.policy(doc)
	}
	if len(l.Errs) > 0 {
		return nil, l.priceFiles, invalid("\n", l.Errs...)
	}
	p.Warnings = l.warns
	p.protected = p.protectedHeaders()
	for _, r := range p.Rules {
		p.prioritized = p.prioritized || r.hasPriority
	}
	return p, l.priceFiles, nil
}

// invalid wraps errs in ErrInvalid: "policy: invalid:" then sep then the
// errors, one per line.
func invalid(sep string, errs ...error) error {
	return fmt.Errorf("%w:%s%w", ErrInvalid, sep, errors.Join(errs...))
}

// Error is one error of a policy file: where it is and what is wrong.
// Parse, Load and ParseLimit return every one found, joined; Errors lists
// them.
type Error struct {
	File  string
	Line  int    // 0 when the error is about no line in particular
	Rule  string // the rule's name, "" outside a rule
	Limit string // the limit's name, "" outside a limit
	Field string // as the file writes it, dotted ("action.max_delay"); "" when Msg names it
	Msg   string // what is wrong
}

// Error formats e as `file:line: rule "r": limit "l": field: msg`,
// leaving out the parts e does not have.
func (e *Error) Error() string {
	return yamlload.Message(e.File, e.Line, []string{yamlload.Named("rule", e.Rule), yamlload.Named("limit", e.Limit)}, e.Field, e.Msg)
}

// Errors returns the *Error values err carries (none when err is not a
// policy error, for example when the file could not be read), in the
// order found.
func Errors(err error) []*Error { return yamlload.Collect[*Error](err) }

// loader walks the YAML tree, collecting errors and warnings.
type loader struct {
	yamlload.Loader[where]
	file  string
	opts  Options
	warns []string
	// proxies is how many trusted_proxies the policy lists.
	proxies int
	// hasJWT: the policy has a jwt: section (jwt:CLAIM keys and claim
	// overrides need one).
	hasJWT bool
	// hasExpr: some rule or limit has a CEL expression.
	hasExpr bool
	// priceFiles are the files of prices the policy names, each once,
	// in the order they are first named (read or not).
	priceFiles []string
}

// warn records something that loads but is likely not what was meant.
func (l *loader) warn(n *yaml.Node, w where, field, format string, args ...any) {
	e := &Error{File: l.file, Line: n.Line, Rule: w.rule, Limit: w.limit, Field: field, Msg: fmt.Sprintf(format, args...)}
	l.warns = append(l.warns, e.Error())
}

func newLoader(file string, opts Options) *loader {
	l := &loader{file: file, opts: opts}
	l.New = func(line int, w where, field, msg string) error {
		return &Error{File: file, Line: line, Rule: w.rule, Limit: w.limit, Field: field, Msg: msg}
	}
	return l
}

// decode parses data, recording a syntax error or a second document
// (whose error says one, as in "a policy is one document"). ok is false
// when data is not YAML; doc is nil when it holds no document.
func (l *loader) decode(data []byte, one string) (doc *yaml.Node, ok bool) {
	doc, more, err := yamlload.Decode(data)
	if se, isSyntax := err.(*yamlload.SyntaxError); isSyntax {
		l.FailAt(se.Line, where{}, "", "%s", se.Msg)
		return nil, false
	}
	if more > 0 {
		l.FailAt(more, where{}, "", "a second YAML document; %s", one)
	}
	return doc, true
}

// where is the place an error is about.
type where struct {
	rule, limit string
}

func (l *loader) policy(doc *yaml.Node) *Policy {
	p := &Policy{File: l.file, ClientIP: &httplimit.ClientIP{}, runtime: l.opts.Runtime, bans: l.opts.Bans}
	if doc == nil || len(doc.Content) == 0 {
		l.FailAt(0, where{}, "", "the file is empty; it needs at least one rule")
		return p
	}
	top := doc.Content[0]
	f := l.Fields(top, where{}, "", "trusted_proxies", "client_ip_header", "ipv6_prefix", "rules", "shed", "jwt", "entry_header")
	l.clientIP(f, p.ClientIP)
	if n := f["entry_header"]; n != nil {
		p.entryHeader = l.entryHeader(n, len(p.ClientIP.TrustedProxies))
	}
	if n := f["jwt"]; n != nil {
		l.hasJWT, p.jwt = true, l.jwtSection(n)
	}
	if n := f["shed"]; n != nil {
		p.Shed = l.shed(n)
	}
	l.proxies = len(p.ClientIP.TrustedProxies)
	rules := f["rules"]
	if rules == nil {
		l.Fail(top, where{}, "rules", "missing: a policy needs at least one rule")
		return p
	}
	if rules.Kind != yaml.SequenceNode || len(rules.Content) == 0 {
		l.Fail(rules, where{}, "rules", "want a list of at least one rule")
		return p
	}
	ruleNames := map[string]int{}
	limitNames := map[string]string{}
	for _, rn := range rules.Content {
		r := l.rule(yamlload.Resolve(rn), p, limitNames)
		if r == nil {
			continue
		}
		if line, dup := ruleNames[r.Name]; dup {
			l.Fail(rn, where{rule: r.Name}, "name", "a rule of that name is already defined at line %d", line)
			continue
		}
		ruleNames[r.Name] = rn.Line
		p.Rules = append(p.Rules, r)
	}
	l.resolveWhen(p)
	p.exprs = l.hasExpr
	return p
}

// clientIP reads the fields that say how client addresses are found.
func (l *loader) clientIP(f map[string]*yaml.Node, c *httplimit.ClientIP) {
	if n := f["trusted_proxies"]; n != nil {
		for _, s := range l.Strings(n, where{}, "trusted_proxies") {
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				if a, aerr := netip.ParseAddr(s); aerr == nil {
					pfx, err = a.Prefix(a.BitLen())
				}
			}
			if err != nil {
				l.Fail(n, where{}, "trusted_proxies", "%q is not an address or CIDR prefix", s)
				continue
			}
			c.TrustedProxies = append(c.TrustedProxies, pfx.Masked())
		}
	}
	if n := f["client_ip_header"]; n != nil {
		c.Header, _ = l.Str(n, where{}, "client_ip_header")
		if (&httplimit.ClientIP{Header: c.Header}).Validate() != nil {
			l.Fail(n, where{}, "client_ip_header", "%q: want X-Forwarded-For, Forwarded or X-Real-IP", c.Header)
		}
	}
	if n := f["ipv6_prefix"]; n != nil {
		v, _ := l.Int(n, where{}, "ipv6_prefix", 1, 128)
		c.IPv6Prefix = int(v)
	}
}

// peekName returns the name field of a mapping, if it has a plain one, so
// that errors about its other fields can name it.
func peekName(n *yaml.Node) string {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "name" && n.Content[i+1].Kind == yaml.ScalarNode {
				return n.Content[i+1].Value
			}
		}
	}
	return ""
}

func (l *loader) name(n *yaml.Node, w where, what string) string {
	if n == nil {
		l.FailAt(0, w, "name", "missing: every %s needs a name", what)
		return ""
	}
	s, ok := l.Str(n, w, "name")
	if ok && s == "" {
		l.Fail(n, w, "name", "must not be empty")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e || s[i] == '"' || s[i] == '\\' {
			l.Fail(n, w, "name", "%q: use letters, digits and punctuation other than quotes and backslashes", s)
			break
		}
	}
	return s
}

func (l *loader) rule(n *yaml.Node, p *Policy, limitNames map[string]string) *Rule {
	f := l.Item(n, where{rule: peekName(n)}, "rule", "name", "match", "limits", "action", "cost", "priority", "one_slot")
	name := l.name(f["name"], where{}, "rule")
	if name == "" {
		return nil
	}
	w := where{rule: name}
	r := &Rule{Name: name}
	r.match = l.match(f["match"], w)
	r.Action = l.action(f["action"], w, r)
	if v := f["one_slot"]; v != nil {
		r.OneSlot = l.Bool(v, w, "one_slot")
	}
	if r.OneSlot {
		r.slot = string(decide.AppendKey(nil, name))
	}
	bound := l.delayBound(r.Action)
	limits := f["limits"]
	if v := f["priority"]; v != nil {
		l.priority(v, w, r)
		if limits == nil { // a rule that only gives its requests a priority
			return r
		}
	}
	if limits == nil || limits.Kind != yaml.SequenceNode || len(limits.Content) == 0 {
		at := n
		if limits != nil {
			at = limits
		}
		l.Fail(at, w, "limits", "want a list of at least one limit")
		return r
	}
	for _, ln := range limits.Content {
		lim := l.limit(yamlload.Resolve(ln), w, bound, f["cost"])
		if lim == nil {
			continue
		}
		if other, dup := limitNames[lim.Name]; dup {
			l.Fail(ln, where{rule: name, limit: lim.Name}, "name", "limit names appear in RateLimit headers and must be unique; rule %q already has one", other)
			continue
		}
		limitNames[lim.Name] = name
		r.Limits = append(r.Limits, lim)
	}
	return r
}

// match reads a rule's match (n is nil when the rule has none: it matches
// every request).
func (l *loader) match(n *yaml.Node, w where) *matcher {
	m := &matcher{}
	var methods []string
	host, path := "", "/"
	if n != nil {
		f := l.Fields(n, w, "match", "methods", "host", "path", "expr")
		if v := f["expr"]; v != nil {
			src, _ := l.Str(v, w, "match.expr")
			m.expr = l.compileExpr(v, w, "match.expr", src, celexpr.Match)
		}
		if v := f["methods"]; v != nil {
			methods = l.Strings(v, w, "match.methods")
			for _, meth := range methods {
				if meth == "" || strings.ToUpper(meth) != meth || strings.ContainsAny(meth, " /{}") {
					l.Fail(v, w, "match.methods", "%q is not a method (write GET, POST, ...)", meth)
				}
			}
		}
		if v := f["host"]; v != nil {
			host, _ = l.Str(v, w, "match.host")
			if strings.ContainsAny(host, "/ ") {
				l.Fail(v, w, "match.host", "%q is not a host name", host)
			}
		}
		if v := f["path"]; v != nil {
			path, _ = l.Str(v, w, "match.path")
			if !strings.HasPrefix(path, "/") {
				l.Fail(v, w, "match.path", "%q must start with /", path)
				path = "/"
			}
		}
	}
	m.describe = strings.TrimSpace(strings.Join(methods, ",") + " " + host + path)
	if m.expr != nil {
		m.describe += " if " + m.expr.String()
	}
	if len(methods) == 0 {
		methods = []string{""}
	}
	for _, meth := range methods {
		pattern := strings.TrimSpace(meth + " " + host + path)
		if err := m.add(pattern); err != nil {
			l.Fail(n, w, "match", "%q: %v", pattern, err)
		}
	}
	return m
}

func (l *loader) action(n *yaml.Node, w where, r *Rule) decide.Action {
	a := decide.Action{}
	if n == nil {
		return a
	}
	f := l.Fields(n, w, "action", "refuse", "max_delay", "status", "content_type", "body", "on_error")
	if v := f["refuse"]; v != nil {
		switch s, _ := l.Str(v, w, "action.refuse"); s {
		case "reject":
		case "delay":
			a.Wait = true
		case "shadow":
			r.Shadow = true
		default:
			l.Fail(v, w, "action.refuse", "%q: want reject, delay or shadow", s)
		}
	}
	l.maxDelay(f["max_delay"], n, w, &a)
	if v := f["status"]; v != nil {
		if s, ok := l.Int(v, w, "action.status", math.MinInt64, math.MaxInt64); ok {
			a.Status = int(s)
			if a.Status < 400 || a.Status > 599 {
				l.Fail(v, w, "action.status", "must be a 4xx or 5xx status (got %s)", v.Value)
			}
		}
	}
	if v := f["content_type"]; v != nil {
		a.ContentType, _ = l.Str(v, w, "action.content_type")
	}
	if v := f["on_error"]; v != nil {
		s, _ := l.Str(v, w, "action.on_error")
		m, err := sluice.ParseFailureMode(s)
		if err != nil || m == sluice.FailDefault {
			l.Fail(v, w, "action.on_error", "%q: want open (admit when the store fails), closed (refuse with 503) or fallback (decide with a local limiter)", s)
		}
		r.OnError = m
	}
	if v := f["body"]; v != nil {
		body, _ := l.Str(v, w, "action.body")
		a.Body = []byte(body)
		if a.ContentType == "" {
			a.ContentType = "text/plain; charset=utf-8"
		}
	}
	return a
}

// maxDelay reads action.max_delay (v, nil when absent) of the action n.
func (l *loader) maxDelay(v, n *yaml.Node, w where, a *decide.Action) {
	if v == nil {
		if a.Wait {
			l.Fail(n, w, "action.max_delay", "missing: refuse: delay needs the longest time to wait")
		}
		return
	}
	d, ok := l.Duration(v, w, "action.max_delay")
	a.MaxDelay = d
	if !a.Wait {
		l.Fail(v, w, "action.max_delay", "applies only with refuse: delay")
	}
	if ok && (d <= 0 || d > time.Minute) {
		l.Fail(v, w, "action.max_delay", "must be between 1ms and 1m (got %s)", v.Value)
	}
}

// commonFields are the fields of every limit; the algorithm's own are
// sluice.Algorithm.Fields.
var commonFields = []string{"name", "key", "algorithm", "cost", "max_cost", "overrides", "on_missing", "version", "soft", "count_when", "ban", "when"}

// paramFields are every algorithm's parameters, for the unknown-field
// message before the algorithm is known.
var paramFields = []string{"limit", "window", "rate", "burst", "queue", "nodelay", "warmup", "lease_ttl", "calendar", "timezone"}

// algorithmNames lists the algorithms for messages.
func algorithmNames() string {
	var names []string
	for _, a := range sluice.Algorithms() {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// limit reads one limit of a rule; ruleCost is the rule's cost (nil when
// it has none), the cost of a limit that names none.
func (l *loader) limit(n *yaml.Node, rw where, bound delayBound, ruleCost *yaml.Node) *Limit {
	f := l.Item(n, where{rule: rw.rule, limit: peekName(n)}, "limit", append(slices.Clone(commonFields), paramFields...)...)
	name := l.name(f["name"], rw, "limit")
	if name == "" {
		return nil
	}
	w := where{rule: rw.rule, limit: name}
	lim := &Limit{Name: name}
	alg, ok := l.algorithm(f, n, w, commonFields)
	if !ok {
		return nil
	}
	lim.Limit = l.parameters(f, w, alg, n)
	lim.Limit.Version = l.version(f["version"], w)
	if q := f["queue"]; q != nil {
		l.servable(q, w, "queue", lim.Limit, bound)
	}
	if !l.key(f["key"], n, w, lim) {
		return nil
	}
	if v := f["on_missing"]; v != nil {
		lim.onMissing, lim.missingKey = l.onMissing(v, w)
	}
	if c := f["cost"]; c != nil {
		l.cost(c, w, lim)
	} else {
		l.cost(ruleCost, w, lim)
	}
	l.maxCost(f["max_cost"], w, lim)
	if v := f["soft"]; v != nil {
		lim.soft = l.thousandths(v, w, "soft")
	}
	if v := f["count_when"]; v != nil {
		l.countWhen(v, w, lim)
	}
	if v := f["ban"]; v != nil {
		l.ban(v, w, lim)
	}
	if v := f["when"]; v != nil {
		lim.when = l.when(v, w)
	}
	if v := f["overrides"]; v != nil {
		lim.overrides = l.overrides(v, w, lim.Limit, bound)
		l.warnOverrides(v, w, lim, l.proxies)
	}
	return lim
}

// algorithm reads a limit's algorithm and reports the fields it does not
// take (other than those in common).
func (l *loader) algorithm(f map[string]*yaml.Node, n *yaml.Node, w where, common []string) (sluice.Algorithm, bool) {
	algNode := f["algorithm"]
	if algNode == nil {
		l.Fail(n, w, "algorithm", "missing (one of %s)", algorithmNames())
		return 0, false
	}
	s, ok := l.Str(algNode, w, "algorithm")
	if !ok {
		return 0, false
	}
	alg, err := sluice.ParseAlgorithm(s)
	if err != nil {
		l.Fail(algNode, w, "algorithm", "unknown algorithm %q (want one of %s)", s, algorithmNames())
		return 0, false
	}
	takes := alg.Fields()
	for k, v := range f {
		if !slices.Contains(common, k) && !slices.Contains(takes, k) {
			l.Fail(v, w, k, "not used by %s (it takes %s)", alg, strings.Join(takes, ", "))
		}
	}
	return alg, true
}

// key reads a limit's key; false when it is missing.
func (l *loader) key(keyNode, n *yaml.Node, w where, lim *Limit) bool {
	if keyNode == nil {
		l.Fail(n, w, "key", "missing (global, ip, route, method, host, header:NAME, query:NAME, cookie:NAME, jwt:CLAIM, func:NAME, or a list of these)")
		return false
	}
	lim.key = l.keyParts(keyNode, w, "key")
	return true
}

// keyParts reads a key: one part or a list of parts.
func (l *loader) keyParts(n *yaml.Node, w where, field string) []keyPart {
	var parts []keyPart
	for _, s := range l.Strings(n, w, field) {
		part, err := parseKeyPart(s)
		if err != nil {
			l.Fail(n, w, field, "%v", err)
			continue
		}
		if part.kind == "jwt" && !l.hasJWT {
			l.Fail(n, w, field, "jwt:%s: a claim is read from verified tokens only; add the policy's jwt: section (jwks_file or jwks_url, issuer, audience)", part.name)
			continue
		}
		if part.kind == "expr" {
			if part.expr = l.compileExpr(n, w, field, part.name, celexpr.Key); part.expr == nil {
				continue
			}
		}
		if part.kind == "func" {
			if part.fn = l.opts.Funcs[part.name]; part.fn == nil {
				l.Fail(n, w, field, "func:%s is not registered (policy.Options.Funcs)", part.name)
				continue
			}
		}
		parts = append(parts, part)
	}
	return parts
}

// onMissing reads what a limit does with a request that lacks a part of
// its key: skip, refuse, or count it under another key.
func (l *loader) onMissing(n *yaml.Node, w where) (missing, []keyPart) {
	if n.Kind == yaml.ScalarNode {
		switch n.Value {
		case "skip":
			return missingSkip, nil
		case "refuse":
			return missingRefuse, nil
		}
	}
	parts := l.keyParts(n, w, "on_missing")
	if len(parts) == 0 {
		l.Fail(n, w, "on_missing", "want skip, refuse, or a key to count such requests under (global, ip, [ip, header:X-Tenant], ...)")
	}
	return missingOtherKey, parts
}

// cost reads a limit's cost (v, nil when absent: 1).
func (l *loader) cost(v *yaml.Node, w where, lim *Limit) {
	lim.cost = 1
	if v == nil {
		return
	}
	if v.Kind == yaml.MappingNode {
		l.lateCost(v, w, lim)
		return
	}
	s, _ := l.Str(v, w, "cost")
	if c, err := strconv.ParseInt(s, 10, 64); err == nil {
		if c < 0 || c > lim.Limit.Capacity() {
			l.Fail(v, w, "cost", "must be between 0 and the limit's capacity %d (got %d)", lim.Limit.Capacity(), c)
		}
		lim.cost = c
	} else if h, ok := strings.CutPrefix(s, "header:"); ok && h != "" {
		lim.costHeader = http.CanonicalHeaderKey(h)
	} else if e, ok := strings.CutPrefix(s, "expr:"); ok {
		lim.costExpr = l.compileExpr(v, w, "cost", e, celexpr.Cost)
	} else {
		l.Fail(v, w, "cost", "%q: want a whole number, header:NAME or expr:'...'", s)
	}
}

// maxCost reads the largest cost a client may ask for in a cost header
// (v, nil when absent: the limit's capacity).
func (l *loader) maxCost(v *yaml.Node, w where, lim *Limit) {
	if v == nil {
		return
	}
	if lim.costHeader == "" {
		l.Fail(v, w, "max_cost", "applies only with cost: header:NAME (a cost the client sends; a cost from the response has its own max)")
		return
	}
	c, ok := l.Int(v, w, "max_cost", 1, max(1, lim.Limit.Capacity()))
	if ok {
		lim.maxCost = c
	}
}

// parameters builds the sluice.Limit of one limit from its fields.
func (l *loader) parameters(f map[string]*yaml.Node, w where, alg sluice.Algorithm, n *yaml.Node) sluice.Limit {
	before := len(l.Errs)
	lim := sluice.Limit{Algorithm: alg}
	if v := f["rate"]; v != nil {
		s, _ := l.Str(v, w, "rate")
		r, err := ParseRate(s)
		if err != nil {
			l.Fail(v, w, "rate", "%v", err)
		}
		lim.Count, lim.Period = r.Count, r.Period
	}
	need := func(field string) *yaml.Node {
		v := f[field]
		if v == nil {
			l.Fail(n, w, field, "missing: %s needs %s", alg, strings.Join(alg.Fields(), ", "))
		}
		return v
	}
	count := func(v *yaml.Node) { lim.Count, _ = l.Int(v, w, "limit", 1, math.MaxInt64) }
	takes := alg.Fields()
	switch {
	case slices.Contains(takes, "window"): // a rate, or limit and window
		if f["rate"] != nil {
			if f["limit"] != nil || f["window"] != nil {
				l.Fail(f["rate"], w, "rate", "give either rate, or limit and window, not both")
			}
		} else if lv, wv := need("limit"), need("window"); lv != nil && wv != nil {
			count(lv)
			l.window(wv, f, w, &lim)
		}
		if v := f["rate"]; v != nil && (f["calendar"] != nil || f["timezone"] != nil) {
			l.Fail(v, w, "rate", "a calendar window is written as limit and window (window: 1d, 1w, 1mo or 1y)")
		}
	case slices.Contains(takes, "rate"):
		need("rate")
	case slices.Contains(takes, "limit"):
		if v := need("limit"); v != nil {
			count(v)
		}
	}
	l.params(f, w, alg, need, &lim)
	if len(l.Errs) == before { // report impossible values once the fields read
		if err := lim.Validate(); err != nil {
			l.limitError(err, f, n, w)
		}
	}
	return lim
}

// version reads a limit's version (v, nil when absent: 0).
func (l *loader) version(v *yaml.Node, w where) uint32 {
	if v == nil {
		return 0
	}
	ver, _ := l.Int(v, w, "version", 0, math.MaxUint32)
	return uint32(ver)
}

// calendarWindows are the windows that name a calendar period.
var calendarWindows = map[string]sluice.Calendar{"1d": sluice.Day, "1w": sluice.Week, "1mo": sluice.Month, "1y": sluice.Year}

// window reads a window (v) with the calendar and timezone fields: 1mo and
// 1y are calendar periods (UTC unless a timezone is given); 1d and 1w are
// with calendar: true or a timezone; any other window is a duration from
// the epoch, as it always was (1d without either resets at UTC midnight).
func (l *loader) window(v *yaml.Node, f map[string]*yaml.Node, w where, lim *sluice.Limit) {
	s, ok := l.Str(v, w, "window")
	if !ok {
		return
	}
	if !slices.Contains(lim.Algorithm.Fields(), "calendar") {
		f = nil // reported as fields the algorithm does not take
	}
	cal, set := false, f["calendar"] != nil
	if set {
		cal = l.Bool(f["calendar"], w, "calendar")
	}
	if z := f["timezone"]; z != nil {
		lim.Zone, _ = l.Str(z, w, "timezone")
		if !set {
			cal = true
		}
	}
	unit := calendarWindows[strings.TrimSpace(s)]
	switch {
	case unit >= sluice.Month && !cal && set:
		l.Fail(f["calendar"], w, "calendar", "window %s is always a calendar period; leave calendar out", s)
	case unit >= sluice.Month || unit != 0 && cal:
		lim.Calendar = unit
	case unit == sluice.Week:
		l.Fail(v, w, "window", "1w is a calendar week: add calendar: true (ISO weeks from Monday, UTC) or a timezone; for 7 days counted from the epoch write 7d")
	case cal:
		l.Fail(v, w, "window", "%q: a calendar window is 1d, 1w, 1mo or 1y", s)
	default:
		lim.Period, _ = l.Duration(v, w, "window")
	}
}

// params reads the parameters an algorithm takes besides its rate, with
// their defaults.
func (l *loader) params(f map[string]*yaml.Node, w where, alg sluice.Algorithm, need func(string) *yaml.Node, lim *sluice.Limit) {
	for _, field := range alg.Fields() {
		v := f[field]
		switch field {
		case "burst":
			lim.Burst = lim.Count // default: one period's worth
			if v != nil {
				lim.Burst, _ = l.Int(v, w, field, 1, math.MaxInt64)
			}
		case "queue":
			if v = need(field); v != nil {
				lim.Burst, _ = l.Int(v, w, field, 0, math.MaxInt64)
			}
		case "nodelay":
			if v != nil {
				lim.NoDelay, _ = l.Int(v, w, field, 0, math.MaxInt64)
			}
		case "warmup":
			if v = need(field); v != nil {
				lim.Warmup, _ = l.Duration(v, w, field)
			}
		case "lease_ttl":
			lim.LeaseTTL = time.Minute
			if v != nil {
				lim.LeaseTTL, _ = l.Duration(v, w, field)
			}
		case "limit", "window", "rate", "calendar", "timezone": // read by parameters
		default: // a parameter of a new algorithm this loader does not read
			l.Fail(v, w, field, "%s takes %s, which this loader cannot read", alg, field)
		}
	}
}

// limitError reports a limit that Validate refused, at the field of the
// file that sets the parameter at fault.
func (l *loader) limitError(err error, f map[string]*yaml.Node, n *yaml.Node, w where) {
	var le *sluice.LimitError
	if !errors.As(err, &le) {
		l.Fail(n, w, "", "%v", err)
		return
	}
	field := le.Field
	switch field {
	case "count", "window", "period":
		field = "rate" // or limit and window when the rate is written so
		if f["rate"] == nil && le.Field == "count" {
			field = "limit"
		} else if f["rate"] == nil {
			field = "window"
		}
	}
	msg := le.Detail()
	if field == le.Field {
		msg = le.Reason // "burst: must be ...", not "burst: token_bucket: burst must be ..."
	}
	at := f[field]
	if at == nil {
		at, field, msg = n, "", le.Detail()
	}
	l.Fail(at, w, field, "%s", msg)
}

func (l *loader) overrides(n *yaml.Node, w where, base sluice.Limit, bound delayBound) []override {
	if n.Kind != yaml.SequenceNode {
		l.Fail(n, w, "overrides", "want a list")
		return nil
	}
	var out []override
	for _, on := range n.Content {
		on = yamlload.Resolve(on)
		f := l.Fields(on, w, "overrides", "key", "header", "claim", "equals", "scale", "unlimited", "from")
		o := l.overrideMatch(f, on, w)
		if v := f["unlimited"]; v != nil {
			o.unlimited = l.Bool(v, w, "overrides.unlimited")
		}
		// Every override carries its limit: the base limit itself when
		// the scale is 1, so that a request it matches is never planned
		// with a zero limit.
		o.scale, o.limit = 1, base
		if v := f["scale"]; v != nil {
			o.scale, o.limit = l.scale(v, w, base)
			if o.limit != base {
				l.servable(v, w, "overrides.scale", o.limit, bound)
			}
		} else if !o.unlimited {
			l.Fail(on, w, "overrides", "give scale or unlimited: true")
		}
		l.overrideTrust(f, w, &o)
		out = append(out, o)
	}
	return out
}

// overrideTrust reads from whom a header override is honoured: one that
// grants more (unlimited, scale above 1) only through trusted proxies
// unless from: anyone says otherwise; one that grants less from anyone.
func (l *loader) overrideTrust(f map[string]*yaml.Node, w where, o *override) {
	o.grants = o.unlimited || o.scale > 1
	o.anyone = !o.grants && o.header != ""
	v := f["from"]
	if v == nil {
		return
	}
	switch from, _ := l.Str(v, w, "overrides.from"); from {
	case "trusted_proxies":
	case "anyone":
		o.anyone = true
	default:
		l.Fail(v, w, "overrides.from", "%q: want trusted_proxies (the default for a header override that grants more) or anyone", from)
	}
	if o.header == "" {
		l.Fail(v, w, "overrides.from", "applies only to header overrides")
	}
}

// warnOverrides warns about overrides that grant more to whoever sends a
// value: a client can forge a header, and a key value made of request data
// is only as safe as that data is secret.
func (l *loader) warnOverrides(n *yaml.Node, w where, lim *Limit, proxies int) {
	var fromClient []string
	for _, part := range lim.key {
		if part.kind == "header" || part.kind == "query" || part.kind == "cookie" {
			fromClient = append(fromClient, part.kind+":"+part.name)
		}
	}
	for _, o := range lim.overrides {
		switch {
		case !o.grants:
		case o.header != "" && o.anyone:
			l.warn(n, w, "overrides", "anyone who sends %s: %s gets %s; with from: trusted_proxies only requests through trusted_proxies would (and sluice serve removes the header from the others)", o.header, o.equals, o.grant())
		case o.header != "" && proxies == 0:
			l.warn(n, w, "overrides", "%s: %s can never apply: a header override that grants more is honoured only for requests through trusted_proxies, and the policy lists none", o.header, o.equals)
		case o.key != "" && len(fromClient) > 0:
			l.warn(n, w, "overrides", "anyone who sends the key value %q (%s) gets %s; that is safe only if the value is a secret, such as an API key", o.key, strings.Join(fromClient, "+"), o.grant())
		}
	}
}

// overrideMatch reads what an override matches: a key value, or a header
// or a verified claim and the value it equals.
func (l *loader) overrideMatch(f map[string]*yaml.Node, on *yaml.Node, w where) override {
	var o override
	if v := f["key"]; v != nil {
		o.key, _ = l.Str(v, w, "overrides.key")
	}
	if v := f["header"]; v != nil {
		h, _ := l.Str(v, w, "overrides.header")
		o.header = http.CanonicalHeaderKey(h)
	}
	if v := f["claim"]; v != nil {
		o.claim, _ = l.Str(v, w, "overrides.claim")
		if !l.hasJWT {
			l.Fail(v, w, "overrides.claim", "%q: a claim is read from verified tokens only; add the policy's jwt: section", o.claim)
		}
	}
	on2 := f["header"] != nil || f["claim"] != nil
	if v := f["equals"]; v != nil {
		o.equals, _ = l.Str(v, w, "overrides.equals")
		if !on2 {
			l.Fail(v, w, "overrides.header", "missing: equals compares a header or a claim")
		}
	} else if on2 {
		what, at := "claim", f["claim"]
		if f["header"] != nil {
			what, at = "header", f["header"]
		}
		l.Fail(at, w, "overrides.equals", "missing: %s needs equals", what)
	}
	n := 0
	for _, k := range []string{"key", "header", "claim"} {
		if f[k] != nil {
			n++
		}
	}
	if n != 1 {
		l.Fail(on, w, "overrides", "give one of key (a key value), header and equals, or claim and equals")
	}
	return o
}

// scale reads an override's scale and returns it with the scaled limit
// (sluice.Limit.Scale: base itself for a scale of 1).
func (l *loader) scale(v *yaml.Node, w where, base sluice.Limit) (float64, sluice.Limit) {
	s, _ := l.Str(v, w, "overrides.scale")
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f > 0 && f <= 1e6) {
		l.Fail(v, w, "overrides.scale", "%q: want a number above 0 (10 for ten times the limit, 0.5 for half)", v.Value)
		return 1, base
	}
	if base.Validate() != nil {
		return f, base // the limit's own error is reported
	}
	scaled, err := base.Scale(f)
	if err != nil {
		l.Fail(v, w, "overrides.scale", "the scaled limit is invalid: %s", detail(err))
	}
	return f, scaled
}

// detail is a sluice.LimitError's message without its sentinel's prefix.
func detail(err error) string {
	var le *sluice.LimitError
	if errors.As(err, &le) {
		return le.Detail()
	}
	return err.Error()
}
