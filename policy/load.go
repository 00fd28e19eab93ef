package policy

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/httplimit"
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
}

// ErrInvalid wraps every error of a policy that does not load.
var ErrInvalid = errors.New("policy: invalid")

// maxFileSize bounds a policy file, so a mistaken path (a log, a device)
// fails fast instead of filling memory.
const maxFileSize = 4 << 20

// Load reads and compiles the policy file at path.
func Load(path string, opts Options) (*Policy, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if st.Size() > maxFileSize {
		return nil, fmt.Errorf("%w: %s: %d bytes, larger than %d", ErrInvalid, path, st.Size(), maxFileSize)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return Parse(path, data, opts)
}

// Parse compiles a policy from YAML; file names it in errors. Every error
// is reported (joined), each naming the file, line, rule, limit and field.
func Parse(file string, data []byte, opts Options) (*Policy, error) {
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%w: %s: %d bytes, larger than %d", ErrInvalid, file, len(data), maxFileSize)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrInvalid, file, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	l := &loader{file: file, opts: opts}
	p := l.policy(&doc)
	if len(l.errs) > 0 {
		return nil, fmt.Errorf("%w:\n%w", ErrInvalid, errors.Join(l.errs...))
	}
	return p, nil
}

// loader walks the YAML tree, collecting errors.
type loader struct {
	file string
	opts Options
	errs []error
}

// where is the place an error is about.
type where struct {
	rule, limit string
}

func (w where) String() string {
	var b strings.Builder
	if w.rule != "" {
		fmt.Fprintf(&b, "rule %q: ", w.rule)
	}
	if w.limit != "" {
		fmt.Fprintf(&b, "limit %q: ", w.limit)
	}
	return b.String()
}

func (l *loader) fail(n *yaml.Node, w where, field, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	l.errs = append(l.errs, fmt.Errorf("%s:%d: %s%s", l.file, n.Line, w, msg))
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// fields reads a mapping, reporting unknown and repeated keys.
func (l *loader) fields(n *yaml.Node, w where, field string, allowed ...string) map[string]*yaml.Node {
	n = resolve(n)
	out := map[string]*yaml.Node{}
	if n.Kind != yaml.MappingNode {
		l.fail(n, w, field, "want a mapping of %s", strings.Join(allowed, ", "))
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		switch {
		case !slices.Contains(allowed, k.Value):
			l.fail(k, w, "", "unknown field %q (known: %s)", k.Value, strings.Join(allowed, ", "))
		case out[k.Value] != nil:
			l.fail(k, w, "", "field %q appears twice", k.Value)
		default:
			out[k.Value] = v
		}
	}
	return out
}

func (l *loader) str(n *yaml.Node, w where, field string) string {
	if n.Kind != yaml.ScalarNode {
		l.fail(n, w, field, "want a string")
		return ""
	}
	return n.Value
}

func (l *loader) int(n *yaml.Node, w where, field string, min int64) int64 {
	v, err := strconv.ParseInt(l.str(n, w, field), 10, 64)
	switch {
	case n.Kind != yaml.ScalarNode:
	case err != nil:
		l.fail(n, w, field, "%q is not a whole number", n.Value)
	case v < min:
		l.fail(n, w, field, "must be at least %d (got %d)", min, v)
	default:
		return v
	}
	return 0
}

func (l *loader) duration(n *yaml.Node, w where, field string) time.Duration {
	s := l.str(n, w, field)
	if n.Kind != yaml.ScalarNode {
		return 0
	}
	d, err := ParseDuration(s)
	if err != nil {
		l.fail(n, w, field, "%v", err)
	}
	return d
}

func (l *loader) strings(n *yaml.Node, w where, field string) []string {
	if n.Kind == yaml.ScalarNode {
		return []string{n.Value}
	}
	if n.Kind != yaml.SequenceNode {
		l.fail(n, w, field, "want a string or a list of strings")
		return nil
	}
	var out []string
	for _, c := range n.Content {
		out = append(out, l.str(resolve(c), w, field))
	}
	return out
}

func (l *loader) policy(doc *yaml.Node) *Policy {
	p := &Policy{File: l.file, ClientIP: &httplimit.ClientIP{}}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		l.errs = append(l.errs, fmt.Errorf("%s: the file is empty; it needs at least one rule", l.file))
		return p
	}
	f := l.fields(doc.Content[0], where{}, "", "trusted_proxies", "client_ip_header", "ipv6_prefix", "rules")
	if n := f["trusted_proxies"]; n != nil {
		for _, s := range l.strings(n, where{}, "trusted_proxies") {
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				if a, aerr := netip.ParseAddr(s); aerr == nil {
					pfx, err = a.Prefix(a.BitLen())
				}
			}
			if err != nil {
				l.fail(n, where{}, "trusted_proxies", "%q is not an address or CIDR prefix", s)
				continue
			}
			p.ClientIP.TrustedProxies = append(p.ClientIP.TrustedProxies, pfx.Masked())
		}
	}
	if n := f["client_ip_header"]; n != nil {
		p.ClientIP.Header = l.str(n, where{}, "client_ip_header")
	}
	if n := f["ipv6_prefix"]; n != nil {
		p.ClientIP.IPv6Prefix = int(l.int(n, where{}, "ipv6_prefix", 1))
	}
	if err := p.ClientIP.Validate(); err != nil {
		l.fail(doc.Content[0], where{}, "", "%s", strings.TrimPrefix(err.Error(), "httplimit: "))
	}
	rules := f["rules"]
	if rules == nil {
		l.fail(doc.Content[0], where{}, "rules", "missing: a policy needs at least one rule")
		return p
	}
	if rules.Kind != yaml.SequenceNode || len(rules.Content) == 0 {
		l.fail(rules, where{}, "rules", "want a list of at least one rule")
		return p
	}
	ruleNames := map[string]int{}
	limitNames := map[string]string{}
	for _, rn := range rules.Content {
		r := l.rule(resolve(rn), p, limitNames)
		if r == nil {
			continue
		}
		if line, dup := ruleNames[r.Name]; dup {
			l.fail(rn, where{rule: r.Name}, "name", "a rule of that name is already defined at line %d", line)
			continue
		}
		ruleNames[r.Name] = rn.Line
		p.Rules = append(p.Rules, r)
	}
	return p
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
		l.errs = append(l.errs, fmt.Errorf("%s: %sname: missing: every %s needs a name", l.file, w, what))
		return ""
	}
	s := l.str(n, w, "name")
	if s == "" {
		l.fail(n, w, "name", "must not be empty")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e || s[i] == '"' || s[i] == '\\' {
			l.fail(n, w, "name", "%q: use letters, digits and punctuation other than quotes and backslashes", s)
			break
		}
	}
	return s
}

func (l *loader) rule(n *yaml.Node, p *Policy, limitNames map[string]string) *Rule {
	f := l.fields(n, where{rule: peekName(n)}, "rule", "name", "match", "limits", "action")
	name := l.name(f["name"], where{}, "rule")
	if name == "" {
		return nil
	}
	w := where{rule: name}
	r := &Rule{Name: name}
	if m := f["match"]; m != nil {
		r.match = l.match(m, w)
	} else {
		r.match = l.match(nil, w)
	}
	r.Action = l.action(f["action"], w, &r.OnError)
	bound := l.delayBound(r.Action)
	limits := f["limits"]
	if limits == nil || limits.Kind != yaml.SequenceNode || len(limits.Content) == 0 {
		at := n
		if limits != nil {
			at = limits
		}
		l.fail(at, w, "limits", "want a list of at least one limit")
		return r
	}
	for _, ln := range limits.Content {
		lim := l.limit(resolve(ln), w, p, bound)
		if lim == nil {
			continue
		}
		if other, dup := limitNames[lim.Name]; dup {
			l.fail(ln, where{rule: name, limit: lim.Name}, "name", "limit names appear in RateLimit headers and must be unique; rule %q already has one", other)
			continue
		}
		limitNames[lim.Name] = name
		r.Limits = append(r.Limits, lim)
	}
	return r
}

func (l *loader) match(n *yaml.Node, w where) *matcher {
	m := &matcher{}
	var methods []string
	host, path := "", "/"
	if n != nil {
		f := l.fields(n, w, "match", "methods", "host", "path")
		if v := f["methods"]; v != nil {
			methods = l.strings(v, w, "match.methods")
			for _, meth := range methods {
				if meth == "" || strings.ToUpper(meth) != meth || strings.ContainsAny(meth, " /{}") {
					l.fail(v, w, "match.methods", "%q is not a method (write GET, POST, ...)", meth)
				}
			}
		}
		if v := f["host"]; v != nil {
			host = l.str(v, w, "match.host")
			if strings.ContainsAny(host, "/ ") {
				l.fail(v, w, "match.host", "%q is not a host name", host)
			}
		}
		if v := f["path"]; v != nil {
			path = l.str(v, w, "match.path")
			if !strings.HasPrefix(path, "/") {
				l.fail(v, w, "match.path", "%q must start with /", path)
				path = "/"
			}
		}
	}
	m.describe = strings.TrimSpace(strings.Join(methods, ",") + " " + host + path)
	if len(methods) == 0 {
		methods = []string{""}
	}
	for _, meth := range methods {
		pattern := strings.TrimSpace(meth + " " + host + path)
		if err := m.add(pattern); err != nil {
			at := n
			if at == nil {
				at = &yaml.Node{}
			}
			l.fail(at, w, "match", "%q: %v", pattern, err)
		}
	}
	return m
}

func (l *loader) action(n *yaml.Node, w where, onError *failover.Mode) httplimit.Action {
	a := httplimit.Action{}
	if n == nil {
		return a
	}
	f := l.fields(n, w, "action", "refuse", "max_delay", "status", "content_type", "body", "on_error")
	if v := f["refuse"]; v != nil {
		switch s := l.str(v, w, "action.refuse"); s {
		case "reject":
		case "delay":
			a.Wait = true
		case "shadow":
			a.Shadow = true
		default:
			l.fail(v, w, "action.refuse", "%q: want reject, delay or shadow", s)
		}
	}
	if v := f["max_delay"]; v != nil {
		a.MaxDelay = l.duration(v, w, "action.max_delay")
		if !a.Wait {
			l.fail(v, w, "action.max_delay", "applies only with refuse: delay")
		}
		if a.MaxDelay <= 0 || a.MaxDelay > time.Minute {
			l.fail(v, w, "action.max_delay", "must be between 1ms and 1m (got %s)", v.Value)
		}
	} else if a.Wait {
		l.fail(n, w, "action.max_delay", "missing: refuse: delay needs the longest time to wait")
	}
	if v := f["status"]; v != nil {
		a.Status = int(l.int(v, w, "action.status", 0))
		if a.Status < 400 || a.Status > 599 {
			l.fail(v, w, "action.status", "must be a 4xx or 5xx status (got %s)", v.Value)
		}
	}
	if v := f["content_type"]; v != nil {
		a.ContentType = l.str(v, w, "action.content_type")
	}
	if v := f["on_error"]; v != nil {
		s := l.str(v, w, "action.on_error")
		m, err := failover.ParseMode(s)
		if err != nil {
			l.fail(v, w, "action.on_error", "%q: want open (admit when the store fails), closed (refuse with 503) or fallback (decide with a local limiter)", s)
		}
		a.FailClosed = m == failover.FailClosed
		*onError = m
	}
	if v := f["body"]; v != nil {
		a.Body = []byte(l.str(v, w, "action.body"))
		if a.ContentType == "" {
			a.ContentType = "text/plain; charset=utf-8"
		}
	}
	return a
}

// limitFields lists, per algorithm, the fields a limit may set besides
// name, key, algorithm, cost and overrides.
var limitFields = map[sluice.Algorithm][]string{
	sluice.AlgorithmFixedWindow:   {"limit", "window", "rate"},
	sluice.AlgorithmSlidingLog:    {"limit", "window", "rate"},
	sluice.AlgorithmSlidingWindow: {"limit", "window", "rate"},
	sluice.AlgorithmTokenBucket:   {"rate", "burst"},
	sluice.AlgorithmGCRA:          {"rate", "burst"},
	sluice.AlgorithmLeakyBucket:   {"rate", "queue", "nodelay"},
	sluice.AlgorithmWarmUp:        {"rate", "warmup"},
	sluice.AlgorithmConcurrency:   {"limit", "lease_ttl"},
}

func (l *loader) limit(n *yaml.Node, rw where, p *Policy, bound delayBound) *Limit {
	common := []string{"name", "key", "algorithm", "cost", "overrides"}
	all := append(slices.Clone(common), "limit", "window", "rate", "burst", "queue", "nodelay", "warmup", "lease_ttl")
	f := l.fields(n, where{rule: rw.rule, limit: peekName(n)}, "limit", all...)
	name := l.name(f["name"], rw, "limit")
	if name == "" {
		return nil
	}
	w := where{rule: rw.rule, limit: name}
	lim := &Limit{Name: name}

	algNode := f["algorithm"]
	if algNode == nil {
		l.fail(n, w, "algorithm", "missing (one of fixed_window, sliding_log, sliding_window, token_bucket, gcra, leaky_bucket, warm_up, concurrency)")
		return nil
	}
	alg, err := sluice.ParseAlgorithm(l.str(algNode, w, "algorithm"))
	if err != nil {
		l.fail(algNode, w, "algorithm", "%s", strings.TrimPrefix(err.Error(), sluice.ErrInvalidLimit.Error()+": "))
		return nil
	}
	for k, v := range f {
		if !slices.Contains(common, k) && !slices.Contains(limitFields[alg], k) {
			l.fail(v, w, k, "not used by %s (it takes %s)", alg, strings.Join(limitFields[alg], ", "))
		}
	}
	lim.Limit = l.parameters(f, w, alg, n)
	if q := f["queue"]; q != nil {
		l.servable(q, w, "queue", lim.Limit, bound)
	}

	keyNode := f["key"]
	if keyNode == nil {
		l.fail(n, w, "key", "missing (global, ip, route, method, host, header:NAME, query:NAME, cookie:NAME, func:NAME, or a list of these)")
		return nil
	}
	for _, s := range l.strings(keyNode, w, "key") {
		part, err := parseKeyPart(s)
		if err != nil {
			l.fail(keyNode, w, "key", "%v", err)
			continue
		}
		if part.kind == "func" && l.opts.Funcs[part.name] == nil {
			l.fail(keyNode, w, "key", "func:%s is not registered (policy.Options.Funcs)", part.name)
			continue
		}
		if part.kind == "func" {
			part.fn = l.opts.Funcs[part.name]
		}
		lim.key = append(lim.key, part)
	}
	if v := f["cost"]; v != nil {
		s := l.str(v, w, "cost")
		if c, err := strconv.ParseInt(s, 10, 64); err == nil {
			if c < 0 || c > lim.Limit.Capacity() {
				l.fail(v, w, "cost", "must be between 0 and the limit's capacity %d (got %d)", lim.Limit.Capacity(), c)
			}
			lim.cost = c
		} else if h, ok := strings.CutPrefix(s, "header:"); ok && h != "" {
			lim.costHeader = http.CanonicalHeaderKey(h)
		} else {
			l.fail(v, w, "cost", "%q: want a whole number or header:NAME", s)
		}
	} else {
		lim.cost = 1
	}
	if v := f["overrides"]; v != nil {
		lim.overrides = l.overrides(v, w, lim.Limit, bound)
	}
	return lim
}

// parameters builds the sluice.Limit of one limit from its fields.
func (l *loader) parameters(f map[string]*yaml.Node, w where, alg sluice.Algorithm, n *yaml.Node) sluice.Limit {
	before := len(l.errs)
	var rate sluice.Rate
	if v := f["rate"]; v != nil {
		r, err := ParseRate(l.str(v, w, "rate"))
		if err != nil {
			l.fail(v, w, "rate", "%v", err)
		}
		rate = r
	}
	need := func(field string) *yaml.Node {
		v := f[field]
		if v == nil {
			l.fail(n, w, field, "missing: %s needs %s", alg, strings.Join(limitFields[alg], ", "))
		}
		return v
	}
	var lim sluice.Limit
	switch alg {
	case sluice.AlgorithmFixedWindow, sluice.AlgorithmSlidingLog, sluice.AlgorithmSlidingWindow:
		if f["rate"] != nil {
			if f["limit"] != nil || f["window"] != nil {
				l.fail(f["rate"], w, "rate", "give either rate, or limit and window, not both")
			}
		} else if lv, wv := need("limit"), need("window"); lv != nil && wv != nil {
			rate = sluice.Per(l.int(lv, w, "limit", 1), l.duration(wv, w, "window"))
		}
		lim = sluice.Limit{Algorithm: alg, Count: rate.Count, Period: rate.Period}
	case sluice.AlgorithmTokenBucket, sluice.AlgorithmGCRA:
		need("rate")
		burst := rate.Count // default: one period's worth
		if v := f["burst"]; v != nil {
			burst = l.int(v, w, "burst", 1)
		}
		lim = sluice.Limit{Algorithm: alg, Count: rate.Count, Period: rate.Period, Burst: burst}
	case sluice.AlgorithmLeakyBucket:
		need("rate")
		lim = sluice.LeakyBucket(rate, 0)
		if v := need("queue"); v != nil {
			lim.Burst = l.int(v, w, "queue", 0)
		}
		if v := f["nodelay"]; v != nil {
			lim.NoDelay = l.int(v, w, "nodelay", 0)
		}
	case sluice.AlgorithmWarmUp:
		need("rate")
		lim = sluice.WarmUp(rate, 0)
		if v := need("warmup"); v != nil {
			lim.Warmup = l.duration(v, w, "warmup")
		}
	case sluice.AlgorithmConcurrency:
		lim = sluice.Concurrency(0, time.Minute)
		if v := need("limit"); v != nil {
			lim.Count = l.int(v, w, "limit", 1)
		}
		if v := f["lease_ttl"]; v != nil {
			lim.LeaseTTL = l.duration(v, w, "lease_ttl")
		}
	}
	if len(l.errs) == before { // report impossible values once the fields read
		if err := lim.Validate(); err != nil {
			l.fail(n, w, "", "%s", strings.TrimPrefix(err.Error(), sluice.ErrInvalidLimit.Error()+": "))
		}
	}
	return lim
}

func (l *loader) overrides(n *yaml.Node, w where, base sluice.Limit, bound delayBound) []override {
	if n.Kind != yaml.SequenceNode {
		l.fail(n, w, "overrides", "want a list")
		return nil
	}
	var out []override
	for _, on := range n.Content {
		on = resolve(on)
		f := l.fields(on, w, "overrides", "key", "header", "equals", "scale", "unlimited")
		o := override{scale: 1}
		if v := f["key"]; v != nil {
			o.key = l.str(v, w, "overrides.key")
		}
		if v := f["header"]; v != nil {
			o.header = http.CanonicalHeaderKey(l.str(v, w, "overrides.header"))
			if f["equals"] == nil {
				l.fail(v, w, "overrides.equals", "missing: header needs equals")
			}
		}
		if v := f["equals"]; v != nil {
			o.equals = l.str(v, w, "overrides.equals")
			if f["header"] == nil {
				l.fail(v, w, "overrides.header", "missing: equals compares a header")
			}
		}
		if (f["key"] == nil) == (f["header"] == nil) {
			l.fail(on, w, "overrides", "give either key (a key value) or header and equals")
		}
		if v := f["unlimited"]; v != nil {
			o.unlimited = l.str(v, w, "overrides.unlimited") == "true"
			if !o.unlimited && v.Value != "false" {
				l.fail(v, w, "overrides.unlimited", "want true or false")
			}
		}
		if v := f["scale"]; v != nil {
			s, err := strconv.ParseFloat(l.str(v, w, "overrides.scale"), 64)
			if err != nil || s <= 0 || s > 1e6 {
				l.fail(v, w, "overrides.scale", "%q: want a number above 0 (10 for ten times the limit, 0.5 for half)", v.Value)
			}
			o.scale = s
		}
		if f["scale"] == nil && !o.unlimited {
			l.fail(on, w, "overrides", "give scale or unlimited: true")
		}
		if o.scale != 1 {
			o.limit = scale(base, o.scale)
			if err := o.limit.Validate(); err != nil {
				l.fail(on, w, "overrides.scale", "the scaled limit is invalid: %s", strings.TrimPrefix(err.Error(), sluice.ErrInvalidLimit.Error()+": "))
			} else {
				l.servable(f["scale"], w, "overrides.scale", o.limit, bound)
			}
		}
		out = append(out, o)
	}
	return out
}

// scale multiplies a limit's counts by s (at least 1 each).
func scale(l sluice.Limit, s float64) sluice.Limit {
	mul := func(n int64) int64 { return max(1, int64(float64(n)*s+0.5)) }
	l.Count = mul(l.Count)
	switch l.Algorithm {
	case sluice.AlgorithmTokenBucket, sluice.AlgorithmGCRA:
		l.Burst = mul(l.Burst)
	case sluice.AlgorithmLeakyBucket:
		l.Burst = max(0, int64(float64(l.Burst)*s+0.5))
		l.NoDelay = min(l.NoDelay, l.Burst)
	}
	return l
}
