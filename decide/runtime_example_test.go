package decide_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
)

// tiers is a decide.Runtime in a map: limit name, key value, override.
type tiers map[string]map[string]decide.RuntimeOverride

func (t tiers) Names(limit string) bool { return len(t[limit]) > 0 }

func (t tiers) Override(limit, value string) (decide.RuntimeOverride, bool) {
	o, ok := t[limit][value]
	return o, ok
}

// A front-end planning a check of the per-tenant limit asks ApplyRuntime
// for the override an operator set for the tenant: acme's limit is five
// times the configured one, bulk's is lifted (the check is not to run),
// other's is the configured one.
func ExampleApplyRuntime() {
	rt := tiers{"per-tenant": {"acme": {Scale: 5}, "bulk": {Unlimited: true}}}
	base := sluice.FixedWindow(100, time.Hour)
	for _, tenant := range []string{"acme", "bulk", "other"} {
		c := decide.Check{Name: "per-tenant", Limit: base, Cost: 1}
		applied, unlimited := decide.ApplyRuntime(rt, &c, "per-tenant", tenant, base)
		fmt.Printf("%s: applied %v, unlimited %v, limit %s, override %q\n", tenant, applied, unlimited, c.Limit, c.Override)
	}
	// Output:
	// acme: applied true, unlimited false, limit fixed_window(500 per 1h), override "runtime=acme"
	// bulk: applied true, unlimited true, limit fixed_window(100 per 1h), override "runtime=bulk"
	// other: applied false, unlimited false, limit fixed_window(100 per 1h), override ""
}
