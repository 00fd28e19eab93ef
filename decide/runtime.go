package decide

import (
	"fmt"

	"github.com/sluicehq/sluice"
)

// RuntimeOverride changes one key's limit while sluice runs, on top of its
// configuration: what sluice serve's admin API sets (PUT
// /admin/overrides/{limit}/{key}). Exactly one of its fields is set.
type RuntimeOverride struct {
	// Unlimited lifts the limit for the key: its requests are not checked
	// against it.
	Unlimited bool
	// Scale multiplies the limit in force (sluice.Limit.Scale), so that
	// a reload that changes the limit changes the key's too.
	Scale float64
	// Limit replaces the limit for the key. It must share the limit's
	// state (sluice.Limit.Shares: the same algorithm and version), or the
	// key's state would be read as another algorithm's.
	Limit sluice.Limit
}

// Apply returns the limit o gives a key of a limit whose own is base
// (base itself when o lifts the limit), or an error that says why o
// cannot override base: a scale that makes an invalid limit, a limit of
// another algorithm.
func (o RuntimeOverride) Apply(base sluice.Limit) (sluice.Limit, error) {
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

// Runtime is a table of overrides set while sluice runs, by limit name
// and key value. Every front-end's planning consults it through
// ApplyRuntime. Its methods are called on every planned request: they
// must be fast and safe for concurrent use.
type Runtime interface {
	// Names reports whether some override names the limit; only then
	// need planning build the key's value to look it up.
	Names(limit string) bool
	// Override returns the override of the limit for a key value, ok
	// false when there is none.
	Override(limit, value string) (o RuntimeOverride, ok bool)
}

// RuntimePrefix starts Check.Override for a check planned under a runtime
// override: the key value follows.
const RuntimePrefix = "runtime="

// ApplyRuntime is the step of planning that applies runtime overrides, the
// same for every front-end: it looks up the override rt keeps for the
// limit named limit and the key value (as the limit keys it, bounded by
// KeyValue) and, if there is one, sets c.Limit to what it makes of base
// and c.Override to RuntimePrefix and the value. unlimited reports an
// override that lifts the limit: the check is not to run. applied is
// false without an override (or with one base cannot take), and c is
// left alone. rt may be nil.
func ApplyRuntime(rt Runtime, c *Check, limit, value string, base sluice.Limit) (applied, unlimited bool) {
	if rt == nil || !rt.Names(limit) {
		return false, false
	}
	o, ok := rt.Override(limit, value)
	if !ok {
		return false, false
	}
	lim, err := o.Apply(base)
	if err != nil {
		return false, false
	}
	c.Limit, c.Override = lim, RuntimePrefix+value
	return true, o.Unlimited
}
