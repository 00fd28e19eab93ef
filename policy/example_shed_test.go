package policy_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/shed"
)

// A policy's shed: section configures load shedding; rules and a trusted
// proxy's header give requests their priority.
func ExamplePolicy_Priority() {
	p, err := policy.Parse("policy.yaml", []byte(`
trusted_proxies: [10.0.0.0/8]
shed: {algorithm: vegas}
rules:
  - name: reports
    match: {path: /reports/}
    priority: sheddable
`), policy.Options{})
	if err != nil {
		panic(err)
	}
	l, err := shed.New(p.Shed.Config())
	if err != nil {
		panic(err)
	}
	for _, c := range []struct{ peer, path, header string }{
		{"203.0.113.9:1", "/reports/daily", ""},
		{"203.0.113.9:1", "/checkout", "critical"}, // not a trusted proxy: ignored
		{"10.0.0.7:1", "/checkout", "critical"},
	} {
		r := httptest.NewRequest("GET", c.path, nil)
		r.RemoteAddr = c.peer
		if c.header != "" {
			r.Header.Set("Sluice-Priority", c.header)
		}
		fmt.Println(c.path, p.Priority(r))
	}
	fmt.Println(l.Stats().Algorithm)
	// Output:
	// /reports/daily sheddable
	// /checkout default
	// /checkout critical
	// vegas
}
