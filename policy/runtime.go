package policy

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
)

// RuntimeOverride changes one key's limit while sluice runs, on top of the
// policy file: what sluice serve's admin API sets (PUT
// /admin/overrides/{limit}/{key}). Exactly one of its fields is set.
type RuntimeOverride struct {
	// Unlimited lifts the limit for the key: its requests are not checked
	// against it.
	Unlimited bool
	// Scale multiplies the limit of the policy in force
	// (sluice.Limit.Scale), so that a reload that changes the limit
	// changes the key's too.
	Scale float64
	// Limit replaces the limit for the key. It must share the limit's
	// state (sluice.Limit.Shares: the same algorithm and version), or the
	// key's state would be read as another algorithm's.
	Limit sluice.Limit
}

// Runtime is a table of overrides set while sluice runs (Options.Runtime).
// Plan consults it for every limit it names before the limit's own
// overrides from the file: an override set at runtime wins. Its methods
// are called on every planned request: they must be fast and safe for
// concurrent use.
type Runtime interface {
	// Names reports whether some override names the limit; only then does
	// planning build the key's value to look it up.
	Names(limit string) bool
	// Override returns the override of the limit for a key value (as
	// Limit.KeyValue gives it), ok false when there is none.
	Override(limit, value string) (o RuntimeOverride, ok bool)
}

// runtimePrefix starts decide.Check.Override for a check planned under a
// runtime override: the key value follows, for Relimit to find it again.
const runtimePrefix = "runtime="

// wantsValue reports whether planning l needs its key's value: for
// overrides by key value, from the file or set at runtime.
func (p *Policy) wantsValue(l *Limit) bool {
	return len(l.overrides) > 0 || p.runtime != nil && p.runtime.Names(l.Name)
}

// runtimeOverride returns the limit a runtime override gives value under
// l, with the check's Override; unlimited when it lifts the limit; ok false
// without one (or with a scale the limit in force cannot take).
func (p *Policy) runtimeOverride(l *Limit, value string) (lim sluice.Limit, id string, unlimited, ok bool) {
	if p.runtime == nil || !p.runtime.Names(l.Name) {
		return lim, "", false, false
	}
	o, found := p.runtime.Override(l.Name, value)
	if !found {
		return lim, "", false, false
	}
	lim, err := o.apply(l.Limit)
	if err != nil {
		return lim, "", false, false
	}
	return lim, runtimePrefix + value, o.Unlimited, true
}

// apply returns the limit o gives a key of a limit whose own is base.
func (o RuntimeOverride) apply(base sluice.Limit) (sluice.Limit, error) {
	switch {
	case o.Unlimited:
		return base, nil
	case o.Scale != 0:
		return base.Scale(o.Scale)
	case !o.Limit.Shares(base):
		return base, fmt.Errorf("the limit is %s, which keeps no state a %s can read: give the same algorithm (and version)", o.Limit.Algorithm, base.Algorithm)
	}
	return o.Limit, o.Limit.Validate()
}

// CheckRuntime reports whether o can override l: an error that says why
// not (a scale that makes an invalid limit, a limit of another algorithm).
func (l *Limit) CheckRuntime(o RuntimeOverride) error {
	_, err := o.apply(l.Limit)
	return err
}

// relimitRuntime is Relimit for a check planned under a runtime override:
// the override in force now, else the limit's own.
func (p *Policy) relimitRuntime(l *Limit, c *decide.Check) (sluice.Limit, bool) {
	value := strings.TrimPrefix(c.Override, runtimePrefix)
	lim, _, unlimited, ok := p.runtimeOverride(l, value)
	switch {
	case unlimited:
		return c.Limit, false
	case !ok:
		lim = l.Limit
	}
	if !lim.Shares(c.Limit) {
		return c.Limit, false
	}
	return lim, true
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
