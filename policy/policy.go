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
// A Holder keeps the current policy and swaps in a new one atomically on
// Reload; a policy that fails to load leaves the old one serving.
package policy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/httplimit"
)

// Policy is a compiled policy. It is immutable and safe for concurrent use.
type Policy struct {
	// File is where the policy came from.
	File string
	// Rules in file order.
	Rules []*Rule
	// ClientIP resolves client addresses for ip keys.
	ClientIP *httplimit.ClientIP
}

// Rule is one rule of a policy.
type Rule struct {
	Name   string
	Limits []*Limit
	Action httplimit.Action
	// OnError is the failure mode its action.on_error names (default
	// failover.FailOpen); see Policy.FailureMode.
	OnError failover.Mode
	match   *matcher
}

// Match describes what the rule matches, as written ("POST api.example.com/orders/{id}").
func (r *Rule) Match() string { return r.match.describe }

// Limit is one limit of a rule.
type Limit struct {
	Name       string
	Limit      sluice.Limit
	key        []keyPart
	cost       int64
	costHeader string
	overrides  []override
}

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

// keyPart is one element of a limit's key.
type keyPart struct {
	kind string // global, ip, route, method, host, header, query, cookie, func
	name string // for header, query, cookie, func
	fn   httplimit.KeyFunc
}

// override changes a limit for particular key values or requests.
type override struct {
	key            string // a key value, as computed
	header, equals string // or a request header's value
	scale          float64
	unlimited      bool
	limit          sluice.Limit // the scaled limit
}

// matcher matches requests with net/http's ServeMux patterns.
type matcher struct {
	mux      *http.ServeMux
	describe string
}

var found = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

// add registers a pattern, turning ServeMux's panic on a bad pattern into
// an error.
func (m *matcher) add(pattern string) (err error) {
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

func (m *matcher) matches(r *http.Request) bool {
	_, pattern := m.mux.Handler(r)
	return pattern != ""
}

// Plan appends to dst the limits of every rule matching r, with their keys,
// costs and actions: the policy as an httplimit.Source.
func (p *Policy) Plan(r *http.Request, dst []httplimit.Planned) ([]httplimit.Planned, error) {
	var buf [128]byte
	for _, rule := range p.Rules {
		if !rule.match.matches(r) {
			continue
		}
		for _, l := range rule.Limits {
			key, value, skip, err := p.key(r, rule, l, buf[:0])
			if err != nil {
				return dst, fmt.Errorf("rule %q: limit %q: %w", rule.Name, l.Name, err)
			}
			if skip {
				continue
			}
			lim, unlimited := l.Limit, false
			for _, o := range l.overrides {
				if (o.key != "" && o.key == value) || (o.header != "" && r.Header.Get(o.header) == o.equals) {
					if o.unlimited {
						unlimited = true
					} else {
						lim = o.limit
					}
					break
				}
			}
			if unlimited {
				continue
			}
			cost := l.cost
			if l.costHeader != "" {
				if cost, err = headerCost(r, l.costHeader, lim.Capacity()); err != nil {
					return dst, fmt.Errorf("rule %q: limit %q: %w", rule.Name, l.Name, err)
				}
			}
			dst = append(dst, httplimit.Planned{Name: l.Name, Key: string(key), Limit: lim, Cost: cost, Action: &rule.Action})
		}
	}
	return dst, nil
}

// key builds the store key of a request under one limit: the rule and limit
// names, then the value of each key part, each length-prefixed so that no
// two different requests share a key by accident. Each value passes through
// httplimit.KeyValue: one longer than httplimit.MaxKeyValue bytes is
// replaced by its SHA-256 digest, so a key is at most a few hundred bytes
// per part whatever the request carries. value is the parts'
// values joined by "+", for overrides by key value, when the limit has
// such overrides. skip is true when a part has no value (a missing header:
// the limit does not apply).
func (p *Policy) key(r *http.Request, rule *Rule, l *Limit, b []byte) (key []byte, value string, skip bool, err error) {
	lp := func(b []byte, s string) []byte {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		return append(b, s...)
	}
	b = lp(b, rule.Name)
	b = lp(b, l.Name)
	for _, part := range l.key {
		var v string
		switch part.kind {
		case "global":
			v = "*"
		case "ip":
			if v, err = p.ClientIP.Key(r); err != nil {
				return nil, "", false, err
			}
		case "route":
			_, v = rule.match.mux.Handler(r)
		case "method":
			v = r.Method
		case "host":
			v = r.Host
		case "header":
			v = r.Header.Get(part.name)
		case "query":
			v = r.URL.Query().Get(part.name)
		case "cookie":
			if c, cerr := r.Cookie(part.name); cerr == nil {
				v = c.Value
			}
		case "func":
			if v, err = part.fn(r); err != nil {
				return nil, "", false, err
			}
		}
		if v == "" {
			return nil, "", true, nil
		}
		v = httplimit.KeyValue(v) // long values become a fixed-size digest
		b = lp(b, v)
		if len(l.overrides) > 0 {
			if value != "" {
				value += "+"
			}
			value += v
		}
	}
	return b, value, false, nil
}

func headerCost(r *http.Request, header string, capacity int64) (int64, error) {
	s := r.Header.Get(header)
	if s == "" {
		return 1, nil
	}
	c, err := strconv.ParseInt(s, 10, 64)
	if err != nil || c < 0 || c > capacity {
		return 0, fmt.Errorf("cost header %s: %q is not a whole number from 0 to %d", header, s, capacity)
	}
	return c, nil
}
