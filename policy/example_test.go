package policy_test

import (
	"fmt"

	"github.com/sluicehq/sluice/policy"
)

// A status page names each value of a store key by the part of the limit's
// key it comes from.
func ExampleLimit_KeyNames() {
	p, err := policy.Parse("policy.yaml", []byte(`
rules:
  - name: api
    match: {path: /api/}
    limits:
      - {name: per-user, key: [ip, "header:X-User"], on_missing: [ip], algorithm: fixed_window, limit: 100, window: 1m}
`), policy.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	key, onMissing := p.Rules[0].Limits[0].KeyNames()
	fmt.Println(key, onMissing)
	// Output:
	// [ip header:X-User] [ip]
}
