package policy_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/policy"
)

// TestPlanLateCost: a cost known after the response plans its reservation
// as the check's cost and the rest of it as the check's LateCost, with the
// defaults docs/config.md states (reserve 1, max the capacity, on_missing
// reserve).
func TestPlanLateCost(t *testing.T) {
	p, err := policy.Parse("late.yaml", []byte(`
rules:
  - name: llm
    limits:
      - {name: tokens, key: header:X-User, algorithm: token_bucket, rate: 10000/m,
         cost: {reserve: 100, response_header: x-tokens-used, max: 40000, on_missing: max, strip: true}}
      - {name: rows, key: header:X-User, algorithm: sliding_window, limit: 500, window: 1h,
         cost: {response_header: X-Rows}}
      - {name: bytes, key: header:X-User, algorithm: fixed_window, limit: 1000, window: 1m,
         cost: {reserve: 0, response_header: X-Bytes, on_missing: 7}}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/v1/chat", nil)
	r.Header.Set("X-User", "alice")
	checks, err := p.Plan(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		cost int64
		late decide.LateCost
	}{
		{100, decide.LateCost{Header: "X-Tokens-Used", Max: 40000, Missing: decide.MissingMax, Strip: true}},
		{1, decide.LateCost{Header: "X-Rows", Max: 500}},
		{0, decide.LateCost{Header: "X-Bytes", Max: 1000, Missing: decide.MissingFixed, MissingCost: 7}},
	}
	if len(checks) != len(want) {
		t.Fatalf("%d checks, want %d", len(checks), len(want))
	}
	for i, c := range checks {
		if c.Late == nil || c.Cost != want[i].cost || *c.Late != want[i].late {
			t.Errorf("%s: cost %d, late %+v; want %d, %+v", c.Name, c.Cost, c.Late, want[i].cost, want[i].late)
		}
	}
}

// TestRuleCost: a rule's cost is the cost of each of its limits that names
// none, checked against each limit's capacity.
func TestRuleCost(t *testing.T) {
	p, err := policy.Parse("rule-cost.yaml", []byte(`
rules:
  - name: llm
    cost: {reserve: 200, response_header: X-Tokens-Used, max: 8000}
    limits:
      - {name: per-user, key: header:X-User, algorithm: token_bucket, rate: 10000/m}
      - {name: per-tenant, key: header:X-Tenant, algorithm: token_bucket, rate: 100000/m}
      - {name: calls, key: header:X-User, algorithm: gcra, rate: 10/s, cost: 1}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-User", "ann")
	r.Header.Set("X-Tenant", "acme")
	checks, err := p.Plan(r, nil)
	if err != nil || len(checks) != 3 {
		t.Fatalf("%d checks, %v", len(checks), err)
	}
	if want := "per-user by header:X-User token_bucket(10000/m, burst 10000) reserving 200, settled from X-Tokens-Used,"; !strings.Contains(p.Snapshot(), want) {
		t.Errorf("the snapshot logged at load: %s\nwant it to say %s", p.Snapshot(), want)
	}
	for i, want := range []int64{200, 200, 1} {
		if c := checks[i]; c.Cost != want || (c.Late != nil) != (want == 200) {
			t.Errorf("%s: cost %d, late %v", c.Name, c.Cost, c.Late)
		}
	}
	_, err = policy.Parse("rule-cost.yaml", []byte(`
rules:
  - name: llm
    cost: {reserve: 200, response_header: X-Tokens-Used}
    limits:
      - {name: tiny, key: global, algorithm: fixed_window, limit: 100, window: 1m}
`), policy.Options{})
	if want := `rule-cost.yaml:4: rule "llm": limit "tiny": cost.reserve: must be at most 100 (got 200)`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a reservation above a limit's capacity: %v, want %s", err, want)
	}
}
