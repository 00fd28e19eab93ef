package decide_test

import (
	"testing"

	"github.com/sluicehq/sluice/decide"
)

// TestLateCostActual: what a response's values settle at. A value above
// max is charged as max; a malformed value (a sign, a fraction, a unit,
// two values) counts as missing; missing charges what on_missing says.
func TestLateCostActual(t *testing.T) {
	reserve := decide.LateCost{Header: "X-Cost", Max: 1000}
	maxed := decide.LateCost{Header: "X-Cost", Max: 1000, Missing: decide.MissingMax}
	fixed := decide.LateCost{Header: "X-Cost", Max: 1000, Missing: decide.MissingFixed, MissingCost: 5}
	capacityMax := decide.LateCost{Header: "X-Cost", Missing: decide.MissingMax}
	for _, tc := range []struct {
		lc            decide.LateCost
		values        []string
		cost          int64
		found, capped bool
	}{
		{reserve, []string{"120"}, 120, true, false},
		{reserve, []string{" 0 "}, 0, true, false},
		{reserve, []string{"1000"}, 1000, true, false},
		{reserve, []string{"1001"}, 1000, true, true},
		{reserve, []string{"99999999999999999999999"}, 1000, true, true},
		{reserve, nil, 40, false, false},
		{reserve, []string{""}, 40, false, false},
		{reserve, []string{"-5"}, 40, false, false},
		{reserve, []string{"+5"}, 40, false, false},
		{reserve, []string{"1.5"}, 40, false, false},
		{reserve, []string{"12 tokens"}, 40, false, false},
		{reserve, []string{"0x10"}, 40, false, false},
		{reserve, []string{"5", "6"}, 40, false, false},
		{maxed, nil, 1000, false, false},
		{fixed, []string{"abc"}, 5, false, false},
		{capacityMax, nil, 300, false, false},
		{capacityMax, []string{"301"}, 300, true, true},
	} {
		cost, found, capped := tc.lc.Actual(tc.values, 40, 300)
		if cost != tc.cost || found != tc.found || capped != tc.capped {
			t.Errorf("%+v %q: %d %v %v, want %d %v %v", tc.lc, tc.values, cost, found, capped, tc.cost, tc.found, tc.capped)
		}
	}
}
