package policy

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
)

// RuntimeOverride changes one key's limit while sluice runs, on top of the
// policy file (decide.RuntimeOverride).
type RuntimeOverride = decide.RuntimeOverride

// Runtime is a table of overrides set while sluice runs (Options.Runtime,
// decide.Runtime). Plan consults it for every limit it names before the
// limit's own overrides from the file: an override set at runtime wins.
type Runtime = decide.Runtime

// runtimePrefix starts decide.Check.Override for a check planned under a
// runtime override: the key value follows, for Relimit to find it again.
const runtimePrefix = decide.RuntimePrefix

// wantsValue reports whether planning l needs its key's value: for
// overrides by key value, from the file or set at runtime.
func (p *Policy) wantsValue(l *Limit) bool {
	return len(l.overrides) > 0 || p.runtime != nil && p.runtime.Names(l.Name)
}

// ApplyRuntime applies to c, a check a caller planned outside the policy
// (the decision API's explicit checks) and named after a limit of the
// policy, the runtime override of that limit for key, normalised as the
// limit keys it (KeyValue): decide.ApplyRuntime over c's own limit.
// unlimited reports an override that lifts the limit. c is left alone
// when the policy has no such limit or override.
func (p *Policy) ApplyRuntime(c *decide.Check, key string) (unlimited bool) {
	if p == nil || p.runtime == nil || !p.runtime.Names(c.Name) {
		return false
	}
	_, l := p.FindLimit(c.Name)
	if l == nil {
		return false
	}
	value, err := p.KeyValue(l, key)
	if err != nil {
		return false
	}
	_, unlimited = decide.ApplyRuntime(p.runtime, c, l.Name, value, c.Limit)
	return unlimited
}

// CheckRuntime reports whether o can override l: an error that says why
// not (a scale that makes an invalid limit, a limit of another algorithm).
func (l *Limit) CheckRuntime(o RuntimeOverride) error {
	_, err := o.Apply(l.Limit)
	return err
}

// relimitRuntime is Relimit for a check planned under a runtime override:
// the override in force now, else the limit's own.
func (p *Policy) relimitRuntime(l *Limit, c *decide.Check) (sluice.Limit, bool) {
	now := decide.Check{Limit: l.Limit}
	_, unlimited := decide.ApplyRuntime(p.runtime, &now, l.Name, strings.TrimPrefix(c.Override, runtimePrefix), l.Limit)
	if unlimited || !now.Limit.Shares(c.Limit) {
		return c.Limit, false
	}
	return now.Limit, true
}

// KeyValue returns the value of a key of l as planning computes it from an
// operator's writing of it (a runtime override's {key}): the values of its
// parts joined by "+", each bounded by decide.KeyValue, and the value of an
// ip part in the form client addresses take (::ffff:192.0.2.1 is
// 192.0.2.1; an IPv6 address is its /64, or the policy's ipv6_prefix).
func (p *Policy) KeyValue(l *Limit, value string) (string, error) {
	if value == "" {
		return "", fmt.Errorf("limit %q: the key value is empty", l.Name)
	}
	parts := strings.Split(value, "+")
	if len(l.key) == 1 {
		parts = []string{value}
	}
	if len(parts) != len(l.key) {
		return "", fmt.Errorf("limit %q has key %s: want %d value(s) joined by +, got %d", l.Name, l.Key(), len(l.key), len(parts))
	}
	for i, v := range parts {
		if l.key[i].kind == "ip" {
			a, err := netip.ParseAddr(strings.TrimSpace(v))
			if err != nil {
				return "", fmt.Errorf("limit %q: %q is not an IP address", l.Name, v)
			}
			if v, err = p.ClientIP.KeyOf(a); err != nil {
				return "", err
			}
			parts[i] = v
		}
		parts[i] = decide.KeyValue(parts[i])
	}
	return strings.Join(parts, "+"), nil
}

// FindLimit returns the limit of the policy named name (limit names are
// unique across rules), with its rule; nil when there is none.
func (p *Policy) FindLimit(name string) (*Rule, *Limit) {
	for _, r := range p.Rules {
		for _, l := range r.Limits {
			if l.Name == name {
				return r, l
			}
		}
	}
	return nil, nil
}
