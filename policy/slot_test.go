package policy_test

import (
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/policy"
)

// TestSlotKey: the keys of a rule with one_slot all choose their Redis
// Cluster slot by the rule's name; those of other rules by the whole key.
func TestSlotKey(t *testing.T) {
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
	for _, tc := range []struct {
		path     string
		oneSlot  bool
		wantSlot string
	}{
		{"/orders", true, string(decide.AppendKey(nil, "orders"))},
		{"/other", false, ""},
	} {
		checks, err := p.Plan(httptest.NewRequest("GET", tc.path, nil), nil)
		if err != nil || len(checks) != 2 {
			t.Fatalf("%s: %d checks, %v", tc.path, len(checks), err)
		}
		for _, c := range checks {
			got := p.SlotKey(c.Key)
			switch {
			case tc.oneSlot && got != tc.wantSlot:
				t.Errorf("%s: SlotKey(%q) = %q, want %q", tc.path, c.Key, got, tc.wantSlot)
			case !tc.oneSlot && got != c.Key:
				t.Errorf("%s: SlotKey(%q) = %q, want the whole key", tc.path, c.Key, got)
			}
		}
	}
	for _, key := range []string{"", "x", "99999:a", "3:ab", "9:orders"} { // not keys a rule built
		if got := p.SlotKey(key); got != key {
			t.Errorf("SlotKey(%q) = %q, want the key itself", key, got)
		}
	}
}
