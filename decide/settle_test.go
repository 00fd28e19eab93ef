package decide_test

import (
	"context"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

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

// TestResultSettle: Settle charges each check that reserved a late cost
// what the response reports, once; a refused request and a check without
// a LateCost are not settled; an admitted shadow check is.
func TestResultSettle(t *testing.T) {
	dc, mem := newDecider(t, decide.Config{})
	late := &decide.LateCost{Header: "X-Cost", Max: 500}
	tokens, plain, shadow := check("tokens", 1000), check("plain", 1000), check("shadow", 1000)
	tokens.Cost, tokens.Late = 100, late
	shadow.Cost, shadow.Late, shadow.Shadow = 100, late, true
	values := func(string) []string { return []string{"300"} }
	var res decide.Result
	dc.Run(context.Background(), []decide.Check{tokens, plain, shadow}, &res)
	if !res.Late() {
		t.Fatal("an admitted request with late costs: Late() is false")
	}
	settled := res.Settle(context.Background(), values, nil)
	if len(settled) != 2 || settled[0].Actual != 300 || settled[1].Check.Name != "shadow" {
		t.Fatalf("settled %+v", settled)
	}
	if again := res.Settle(context.Background(), values, nil); len(again) != 0 || res.Late() {
		t.Errorf("a second Settle settled %+v", again)
	}
	for _, c := range []struct {
		c    decide.Check
		want int64
	}{{tokens, 700}, {plain, 999}, {shadow, 700}} {
		if got := remaining(t, mem, c.c); got != c.want {
			t.Errorf("%s: %d left, want %d", c.c.Name, got, c.want)
		}
	}
	// A request the plain limit refuses was charged nothing: nothing to settle.
	full := check("full", 1)
	dc.Run(context.Background(), []decide.Check{full}, &res)
	dc.Run(context.Background(), []decide.Check{tokens, full}, &res)
	if res.Outcome != decide.Refused || res.Late() || len(res.Settle(context.Background(), values, nil)) != 0 {
		t.Errorf("a refused request: outcome %s, settled", res.Outcome)
	}
	if got := remaining(t, mem, tokens); got != 700 {
		t.Errorf("tokens after the refusal: %d left, want 700", got)
	}
}

// FuzzLateCost: whatever a response reports, the cost charged is from 0
// to the max, the reported number itself when it is one in range, and
// what on_missing says otherwise.
func FuzzLateCost(f *testing.F) {
	for _, s := range []string{"120", " 7 ", "-1", "+5", "1e3", "99999999999999999999", "", "0x10", "١٢"} {
		f.Add(s, false)
	}
	lc := decide.LateCost{Header: "X-Cost", Max: 1000, Missing: decide.MissingFixed, MissingCost: 5}
	f.Fuzz(func(t *testing.T, v string, twice bool) {
		values := []string{v}
		if twice {
			values = append(values, v)
		}
		cost, found, capped := lc.Actual(values, 40, 300)
		switch {
		case cost < 0 || cost > 1000:
			t.Fatalf("%q: cost %d outside 0..1000", values, cost)
		case !found && (cost != 5 || capped):
			t.Fatalf("%q: missing, charged %d (capped %v), want on_missing's 5", values, cost, capped)
		case found && twice:
			t.Fatalf("%q: two values read as one", values)
		case found && !capped && strconv.FormatInt(cost, 10) != strings.TrimLeft(strings.TrimSpace(v), "0") && cost != 0:
			t.Fatalf("%q: charged %d", v, cost)
		}
	})
}

// TestDeciderAdjust: an adjustment of any size is cut to the limit's
// MaxAdjust, never an error: a charge stops at the deepest debt a key may
// owe, a refund at an empty limit.
func TestDeciderAdjust(t *testing.T) {
	store, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	dc, err := decide.New(sluice.New(store), decide.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := &decide.Check{Name: "l", Key: "k", Limit: sluice.FixedWindow(10, time.Hour)}
	ctx := context.Background()
	for _, step := range []struct {
		delta     int64
		allowed   bool
		remaining int64
	}{
		{math.MaxInt64, false, 0}, // cut to 40: 30 past the limit
		{math.MaxInt64, false, 0}, // 40 past the limit at most: 50, the rest dropped
		{-40, false, 0},           // the debt paid back: 10 used
		{-1, true, 1},
		{math.MinInt64, true, 10}, // never below empty
	} {
		d, err := dc.Adjust(ctx, c, step.delta)
		if err != nil || d.Allowed != step.allowed || d.Remaining != step.remaining {
			t.Fatalf("Adjust(%d): %+v, %v; want allowed %v, remaining %d", step.delta, d, err, step.allowed, step.remaining)
		}
	}
}

// TestLateCostCheck: a reservation needs a late cost, and a late cost a
// reservation the limit can hold; no late cost and no reservation is fine.
func TestLateCostCheck(t *testing.T) {
	budget := sluice.FixedWindow(100, time.Minute)
	for _, tc := range []struct {
		lc      *decide.LateCost
		reserve int64
		want    string // "" for no error
	}{
		{nil, 0, ""},
		{nil, 5, "Reserve applies only with Late"},
		{&decide.LateCost{Header: "X-Cost"}, 5, ""},
		{&decide.LateCost{Header: "X-Cost"}, 101, "between 0 and the limit's capacity 100"},
	} {
		err := tc.lc.Check(tc.reserve, budget)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v reserving %d: %v, want %q", tc.lc, tc.reserve, err, tc.want)
		}
	}
}
