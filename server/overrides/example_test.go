package overrides_test

import (
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server/overrides"
)

// A Service is the policy.Runtime a policy plans with, and serves the
// admin API that changes it: here an override of scale 5 set for tenant
// acme (kept in memory; sluice serve keeps them in Redis or its state
// directory), which acme's next request is planned under.
func Example() {
	var p *policy.Policy
	svc, _ := overrides.New(overrides.Config{Keeper: overrides.NewMemory(), Policy: func() *policy.Policy { return p },
		Logger: slog.New(slog.DiscardHandler)})
	defer svc.Close()
	p, _ = policy.Parse("policy.yaml", []byte(`
rules:
  - name: tenant
    limits:
      - {name: per-tenant, key: "header:X-Tenant", algorithm: fixed_window, rate: 2/h}
`), policy.Options{Runtime: svc})

	put := httptest.NewRequest("PUT", "/admin/overrides/per-tenant/acme", strings.NewReader(`{"scale": 5, "ttl": "24h", "reason": "launch week"}`))
	w := httptest.NewRecorder()
	svc.Handler().ServeHTTP(w, put)
	fmt.Println(w.Code)

	for _, tenant := range []string{"acme", "other"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Tenant", tenant)
		checks, _ := p.Plan(r, nil)
		fmt.Println(tenant, checks[0].Limit)
	}
	// Output:
	// 200
	// acme fixed_window(10 per 1h)
	// other fixed_window(2 per 1h)
}
