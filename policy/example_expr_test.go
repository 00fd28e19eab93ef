package policy_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/sluicehq/sluice/policy"
)

// A rule whose match is a CEL expression applies only to the requests it
// is true for; a key part expr:'...' keys by what the expression computes.
func ExamplePolicy_Plan_expressions() {
	p, err := policy.Parse("policy.yaml", []byte(`
rules:
  - name: v2
    match: {path: /api/, expr: 'request.headers["x-api-version"] == "2"'}
    limits:
      - {name: v2-tenant, key: "expr:'request.headers[\"x-tenant\"].lowerAscii()'", algorithm: fixed_window, rate: 100/m}
`), policy.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Rules[0].Match())
	for _, version := range []string{"1", "2"} {
		r := httptest.NewRequest("GET", "/api/orders", nil)
		r.Header.Set("X-Api-Version", version)
		r.Header.Set("X-Tenant", "ACME")
		checks, _ := p.Plan(r, nil)
		fmt.Printf("version %s: %d checks\n", version, len(checks))
	}
	// Output:
	// /api/ if request.headers["x-api-version"] == "2"
	// version 1: 0 checks
	// version 2: 1 checks
}
