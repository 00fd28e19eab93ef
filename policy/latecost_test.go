package policy_test

import (
	"net/http/httptest"
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
         cost: {reserve: 100, response_header: x-tokens-used, max: 50000, on_missing: max, strip: true}}
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
		{100, decide.LateCost{Header: "X-Tokens-Used", Max: 50000, Missing: decide.MissingMax, Strip: true}},
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
