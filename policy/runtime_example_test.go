package policy_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/sluicehq/sluice/policy"
)

// tiers is a Runtime of fixed overrides by limit and key value (sluice
// serve's is package server/overrides, changed through its admin API).
type tiers map[string]map[string]policy.RuntimeOverride

func (t tiers) Names(limit string) bool { return len(t[limit]) > 0 }

func (t tiers) Override(limit, value string) (policy.RuntimeOverride, bool) {
	o, ok := t[limit][value]
	return o, ok
}

// A policy plans with the overrides of Options.Runtime before its own:
// here one tenant gets three times the limit and another none.
func ExampleRuntime() {
	rt := tiers{"per-tenant": {
		"acme":     {Scale: 3},
		"internal": {Unlimited: true},
	}}
	p, err := policy.Parse("policy.yaml", []byte(`
rules:
  - name: tenant
    limits:
      - {name: per-tenant, key: "header:X-Tenant", algorithm: fixed_window, rate: 2/h}
`), policy.Options{Runtime: rt})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, tenant := range []string{"acme", "internal", "other"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Tenant", tenant)
		checks, _ := p.Plan(r, nil)
		if len(checks) == 0 {
			fmt.Println(tenant, "unlimited")
			continue
		}
		fmt.Println(tenant, checks[0].Limit)
	}
	// Output:
	// acme fixed_window(6 per 1h)
	// internal unlimited
	// other fixed_window(2 per 1h)
}
