package policy

import (
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
)

var (
	_ decide.Relimiter = (*Policy)(nil)
	_ decide.Relimiter = (*Holder)(nil)
)

// Relimit returns the limit a check planned under an earlier policy (one a
// reload replaced) is charged under now, for a settle: the limit of the
// same name in the same rule (the check's key starts with both), under the
// override of the same match if the check had one and this policy still
// has it (else the limit's own). ok is false, and the check keeps its own
// limit, when this policy has no such limit (the rule or limit is gone or
// renamed), when the override now makes the key unlimited, or when the
// limit's algorithm or version changed: its keys' state is then another,
// and the check's reservation was charged to the old one. It costs a scan
// of the rules, without allocating. It is safe for concurrent use.
func (p *Policy) Relimit(c *decide.Check) (sluice.Limit, bool) {
	l := p.limitOf(c)
	if l == nil {
		return c.Limit, false
	}
	if strings.HasPrefix(c.Override, runtimePrefix) {
		return p.relimitRuntime(l, c)
	}
	lim := l.Limit
	if c.Override != "" {
		for i := range l.overrides {
			if o := &l.overrides[i]; o.id() == c.Override {
				if o.unlimited {
					return c.Limit, false
				}
				lim = o.limit
				break
			}
		}
	}
	if !lim.Shares(c.Limit) {
		return c.Limit, false
	}
	return lim, true
}

// limitOf returns the limit named c.Name of the rule whose keys c.Key
// starts with, or nil (also for a nil p).
func (p *Policy) limitOf(c *decide.Check) *Limit {
	if p == nil {
		return nil
	}
	var buf [128]byte
	for _, r := range p.Rules {
		for _, l := range r.Limits {
			if l.Name == c.Name && hasPrefix(c.Key, decide.AppendKey(buf[:0], r.Name, l.Name)) {
				return l
			}
		}
	}
	return nil
}

// hasPrefix is strings.HasPrefix(s, string(prefix)) without a copy.
func hasPrefix(s string, prefix []byte) bool {
	return len(s) >= len(prefix) && s[:len(prefix)] == string(prefix)
}

// Relimit is Policy.Relimit under the current policy.
func (h *Holder) Relimit(c *decide.Check) (sluice.Limit, bool) {
	return h.current.Load().Relimit(c)
}
