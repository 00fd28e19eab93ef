package policy_test

import (
	"fmt"
	"net/http/httptest"

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

// A rule with one_slot gives each check it plans the rule's part of its
// store key as its slot (decide.Check.Slot, carried to the store in
// sluice.Request.Slot): on a Redis Cluster its keys share one hash slot.
// An operation on one of its keys without a planned check, such as a
// reset, takes the slot from the rule.
func ExampleRule_Slot() {
	p, err := policy.Parse("policy.yaml", []byte(`
rules:
  - name: orders
    match: {path: /orders}
    one_slot: true
    limits:
      - {name: orders-all, key: global, algorithm: gcra, rate: 100/s}
  - name: other
    limits:
      - {name: other-all, key: global, algorithm: gcra, rate: 100/s}
`), policy.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	checks, _ := p.Plan(httptest.NewRequest("GET", "/orders", nil), nil)
	for _, c := range checks {
		fmt.Printf("%s: key %q, slot %q\n", c.Name, c.Key, c.Slot)
	}
	fmt.Printf("%q %q\n", p.Rules[0].Slot(), p.Rules[1].Slot())
	// Output:
	// orders-all: key "6:orders10:orders-all1:*", slot "6:orders"
	// other-all: key "5:other9:other-all1:*", slot ""
	// "6:orders" ""
}
