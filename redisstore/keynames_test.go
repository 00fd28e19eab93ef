package redisstore_test

import (
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redisstore"
)

// TestKeyNames holds the names of the keys in Redis, which are the state
// there: a change would start every count afresh. A policy's rule with
// one_slot gives its checks the rule's part of their keys as their Slot,
// a rule without it none. Without Config.Slots (a standalone server) the
// Slot is ignored; with it (sluice serve on a Cluster) a request without
// one is placed by its whole key.
func TestKeyNames(t *testing.T) {
	p, err := policy.Parse("keys.yaml", []byte(`
rules:
  - name: orders
    match: {path: /orders}
    one_slot: true
    limits:
      - {name: orders-all, key: global, algorithm: gcra, rate: 10/s, burst: 20}
      - {name: orders-ip, key: ip, algorithm: sliding_log, rate: 10/s}
  - name: rest
    match: {path: /rest}
    limits:
      - {name: rest-all, key: global, algorithm: gcra, rate: 10/s, burst: 20}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2][2]string{ // limit: {without Slots, with Slots}: {state, log}
		"orders-all": {
			{"sluice:{24:6:orders10:orders-all1:*}gcra/v0:s", ""},
			{"sluice:{8:6:orders}24:6:orders10:orders-all1:*/gcra/v0:s", ""},
		},
		"orders-ip": {
			{"sluice:{33:6:orders9:orders-ip11:203.0.113.7}sliding_log/v0:s",
				"sluice:{33:6:orders9:orders-ip11:203.0.113.7}sliding_log/v0:l"},
			{"sluice:{8:6:orders}33:6:orders9:orders-ip11:203.0.113.7/sliding_log/v0:s",
				"sluice:{8:6:orders}33:6:orders9:orders-ip11:203.0.113.7/sliding_log/v0:l"},
		},
		"rest-all": {
			{"sluice:{19:4:rest8:rest-all1:*}gcra/v0:s", ""},
			{"sluice:{19:4:rest8:rest-all1:*}19:4:rest8:rest-all1:*/gcra/v0:s", ""},
		},
	}
	seen := 0
	for _, path := range []string{"/orders", "/rest"} {
		hr := httptest.NewRequest("GET", path, nil)
		hr.RemoteAddr = "203.0.113.7:1234"
		checks, err := p.Plan(hr, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range checks {
			r := sluice.Request{Key: c.Key, Slot: c.Slot, Limit: c.Limit, Cost: 1}
			for i, slots := range []bool{false, true} {
				state, log := redisstore.StateKeys("sluice:", slots, r)
				if w := want[c.Name][i]; state != w[0] || log != w[1] {
					t.Errorf("%s, Slots %v: keys %q %q, want %q %q", c.Name, slots, state, log, w[0], w[1])
				}
			}
			seen++
		}
	}
	if seen != len(want) {
		t.Fatalf("%d checks planned, want %d", seen, len(want))
	}
}
