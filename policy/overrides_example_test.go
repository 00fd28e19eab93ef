package policy_test

import (
	"fmt"

	"github.com/sluicehq/sluice/policy"
)

func ExampleLimit_Overrides() {
	p, err := policy.Parse("policy.yaml", []byte(`rules:
  - name: api
    limits:
      - name: per-user
        key: header:X-User
        algorithm: gcra
        rate: 10/s
        burst: 10
        overrides:
          - {key: batch-job, scale: 0.5}
          - {key: admin, unlimited: true}
`), policy.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, o := range p.Rules[0].Limits[0].Overrides() {
		if o.Unlimited {
			fmt.Printf("%s: no limit\n", o.When)
			continue
		}
		fmt.Printf("%s: %v\n", o.When, o.Limit)
	}
	// Output:
	// key batch-job: gcra(5/s, burst 5)
	// key admin: no limit
}
