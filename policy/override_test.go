package policy_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// TestOverrideScaleOne: an override with scale 1 plans the base limit. It
// used to leave the scaled limit unset, so every request it matched was
// refused by the store as an invalid limit and, through the default error
// handler, admitted uncounted.
func TestOverrideScaleOne(t *testing.T) {
	p, err := policy.Parse("scale.yaml", []byte(`
rules:
  - name: api
    limits:
      - name: per-user
        key: header:X-User
        algorithm: leaky_bucket
        rate: 2/s
        queue: 5
        nodelay: 5
        overrides:
          - {key: alice, scale: 1}
          - {header: X-Tier, equals: gold, scale: 1.0}
          - {key: bob, scale: 2}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	base := sluice.LeakyBucket(sluice.PerSecond(2), 5).WithNoDelay(5)
	for _, tc := range []struct {
		user, tier string
		want       sluice.Limit
	}{
		{"alice", "", base},
		{"carol", "gold", base},
		{"carol", "", base},
		{"bob", "", sluice.LeakyBucket(sluice.PerSecond(4), 10).WithNoDelay(10)}, // nodelay scales with the queue
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-User", tc.user)
		if tc.tier != "" {
			r.Header.Set("X-Tier", tc.tier)
		}
		planned, err := p.Plan(r, nil)
		if err != nil || len(planned) != 1 {
			t.Fatalf("%s/%s: %v %v", tc.user, tc.tier, planned, err)
		}
		if got := planned[0].Limit; got != tc.want || got.Validate() != nil {
			t.Errorf("%s/%s: planned %s (%v), want %s", tc.user, tc.tier, got, got.Validate(), tc.want)
		}
	}
}

// TestErrors: a policy's errors are values naming file, line, rule, limit
// and field, listed by policy.Errors, and the whole still wraps ErrInvalid.
func TestErrors(t *testing.T) {
	_, err := policy.Parse("p.yaml", []byte(`
rules:
  - name: api
    limits:
      - name: per-ip
        key: ip
        algorithm: gcra
        rate: 5/s
        burst: 0
        overrides:
          - {key: 192.0.2.1, scale: 1000000}
      - {name: q, key: ip, algorithm: sliding_log, limit: 100, window: 1s, overrides: [{key: x, scale: 100000}]}
    action: {refuse: drop}
`), policy.Options{})
	if !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("%v does not wrap ErrInvalid", err)
	}
	want := []policy.Error{ // a rule's action is read before its limits
		{File: "p.yaml", Line: 13, Rule: "api", Field: "action.refuse", Msg: `"drop": want reject, delay or shadow`},
		{File: "p.yaml", Line: 9, Rule: "api", Limit: "per-ip", Field: "burst", Msg: "must be at least 1 (got 0)"},
		{File: "p.yaml", Line: 12, Rule: "api", Limit: "q", Field: "overrides.scale", Msg: "the scaled limit is invalid: sliding_log: count must be at most 1000000 for sliding_log, which stores every request (got 10000000); use sliding_window"},
	}
	got := policy.Errors(err)
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(got), len(want), err)
	}
	for i := range want {
		if *got[i] != want[i] {
			t.Errorf("error %d:\n got %+v\nwant %+v", i, *got[i], want[i])
		}
	}
	if !strings.HasPrefix(err.Error(), "policy: invalid:\np.yaml:13: rule \"api\": action.refuse: \"drop\": want reject, delay or shadow\n") {
		t.Errorf("message:\n%v", err)
	}
	if policy.Errors(errors.New("other")) != nil {
		t.Error("errors found in a plain error")
	}
}
