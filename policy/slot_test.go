package policy_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/policy"
)

// TestSlot: the checks of a rule with one_slot carry the rule's part of
// their keys as their Slot, so that they all choose their Redis Cluster
// slot by the rule's name; those of other rules carry none (the whole
// key). Rule.Slot names the same part, for operations on a key that have
// no planned check.
func TestSlot(t *testing.T) {
	p, err := policy.Parse("slot.yaml", []byte(`
rules:
  - name: orders
    match: {path: /orders}
    one_slot: true
    limits:
      - {name: orders-all, key: global, algorithm: gcra, rate: 100/s}
      - {name: orders-ip, key: ip, algorithm: gcra, rate: 10/s}
  - name: rest
    match: {path: /other}
    limits:
      - {name: rest-all, key: global, algorithm: gcra, rate: 100/s}
      - {name: rest-ip, key: ip, algorithm: gcra, rate: 10/s}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		path     string
		wantSlot string
	}{
		{"/orders", string(decide.AppendKey(nil, "orders"))},
		{"/other", ""},
	} {
		if got := p.Rules[i].Slot(); got != tc.wantSlot {
			t.Errorf("rule %s: Slot() = %q, want %q", p.Rules[i].Name, got, tc.wantSlot)
		}
		checks, err := p.Plan(httptest.NewRequest("GET", tc.path, nil), nil)
		if err != nil || len(checks) != 2 {
			t.Fatalf("%s: %d checks, %v", tc.path, len(checks), err)
		}
		for _, c := range checks {
			if c.Slot != tc.wantSlot || !strings.HasPrefix(c.Key, c.Slot) {
				t.Errorf("%s: check %s has key %q and Slot %q, want Slot %q", tc.path, c.Name, c.Key, c.Slot, tc.wantSlot)
			}
		}
	}
}
