package decide_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
)

func TestFieldsJoin(t *testing.T) {
	a := decide.Fields{Policy: `"a";q=1`, RateLimit: `"a";r=0`}
	b := decide.Fields{Policy: `"b";q=2`, RateLimit: `"b";r=1`, RetryAfter: "30"}
	for _, tc := range []struct {
		name string
		f, g decide.Fields
		want decide.Fields
	}{
		{"items are appended", a, b, decide.Fields{Policy: `"a";q=1, "b";q=2`, RateLimit: `"a";r=0, "b";r=1`, RetryAfter: "30"}},
		{"empty on the left", decide.Fields{}, b, b},
		{"empty on the right", a, decide.Fields{}, a},
		{"the longer wait", decide.Fields{RetryAfter: "120"}, decide.Fields{RetryAfter: "30"}, decide.Fields{RetryAfter: "120"}},
		{"the longer wait on the right", decide.Fields{RetryAfter: "5"}, decide.Fields{RetryAfter: "30"}, decide.Fields{RetryAfter: "30"}},
		{"an HTTP date is kept", decide.Fields{RetryAfter: "Wed, 21 Oct 2015 07:28:00 GMT"}, decide.Fields{RetryAfter: "30"}, decide.Fields{RetryAfter: "Wed, 21 Oct 2015 07:28:00 GMT"}},
	} {
		if got := tc.f.Join(tc.g); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestUndo: Undo gives back every charge of a request that went on, and
// its leases, once; a request that did not go on, or went on uncounted,
// has nothing to give back.
func TestUndo(t *testing.T) {
	dc, mem := newDecider(t, decide.Config{})
	ctx := context.Background()
	fixed := check("fixed", 5)
	bucket := decide.Check{Name: "bucket", Key: "bucket", Limit: sluice.TokenBucket(sluice.PerHour(1), 5), Cost: 2}
	lease := decide.Check{Name: "lease", Key: "lease", Limit: sluice.Concurrency(1, time.Minute), Cost: 1}
	shadow := decide.Check{Name: "shadow", Key: "shadow", Limit: sluice.FixedWindow(5, time.Hour), Cost: 1, Shadow: true}
	late := decide.Check{Name: "late", Key: "late", Limit: sluice.FixedWindow(50, time.Hour), Cost: 10, Late: &decide.LateCost{Header: "X-Cost"}}
	checks := []decide.Check{fixed, bucket, lease, shadow, late}
	var res decide.Result
	dc.Run(ctx, checks, &res)
	if res.Outcome != decide.Admitted || !res.Late() {
		t.Fatalf("%s, late %v", res.Outcome, res.Late())
	}
	res.Undo(ctx)
	res.Undo(ctx) // a second Undo gives nothing more back
	for _, c := range []decide.Check{fixed, bucket, shadow, late} {
		if left := remaining(t, mem, c); left != c.Limit.Capacity() {
			t.Errorf("%s: %d left after Undo, want %d", c.Name, left, c.Limit.Capacity())
		}
	}
	if res.Late() || !res.Undone() {
		t.Errorf("an undone Result settles (Late %v, Undone %v)", res.Late(), res.Undone())
	}
	if f := res.Fields(); f.RateLimit != `"fixed";r=5;t=0, "bucket";r=5;t=0, "lease";r=1;t=60, "late";r=50;t=0` {
		t.Errorf("fields after Undo: %s", f.RateLimit)
	}
	// The lease was given back: another request holds it now.
	var again decide.Result
	dc.Run(ctx, []decide.Check{lease}, &again)
	if again.Outcome != decide.Admitted {
		t.Fatalf("the lease was kept: %s", again.Outcome)
	}
	again.Release()

	dc.Run(ctx, []decide.Check{check("one", 1)}, &res)
	dc.Run(ctx, []decide.Check{check("one", 1)}, &res)
	res.Undo(ctx) // refused: nothing was charged, nothing to give back
	if left := remaining(t, mem, check("one", 1)); left != 0 {
		t.Errorf("Undo of a refused request gave back a charge: %d left", left)
	}
}

// TestStackUndoOuter: a front-end further in undoes every Result stacked
// for the same response, and none stacked for another.
func TestStackUndoOuter(t *testing.T) {
	dc, mem := newDecider(t, decide.Config{})
	var a, b, c decide.Result
	ctx := context.Background()
	dc.Run(ctx, []decide.Check{check("a", 5)}, &a)
	ctx = decide.Stack(ctx, &a, "response", decide.Fields{Policy: `"other";q=9`, RateLimit: `"other";r=8`})
	dc.Run(ctx, []decide.Check{check("b", 5)}, &b)
	ctx = decide.Stack(ctx, &b, "response", decide.Fields{})
	dc.Run(ctx, []decide.Check{check("c", 5)}, &c)
	sub := decide.Stack(ctx, &c, "sub-response", decide.Fields{})

	own := decide.Fields{Policy: `"d";q=1`, RateLimit: `"d";r=0`, RetryAfter: "60"}
	if got := decide.StackedFields(sub, "sub-response", decide.Fields{}, own); got.Policy != `"c";q=5;w=3600, "d";q=1` {
		t.Errorf("a sub-response lists %s", got.Policy)
	}
	decide.UndoOuter(sub, "another response") // not stacked on it: nothing undone
	if remaining(t, mem, check("a", 5)) != 4 || remaining(t, mem, check("c", 5)) != 4 {
		t.Fatal("undone for another response")
	}
	decide.UndoOuter(ctx, "response")
	for name, want := range map[string]int64{"a": 5, "b": 5, "c": 4} {
		if left := remaining(t, mem, check(name, 5)); left != want {
			t.Errorf("%s: %d left, want %d", name, left, want)
		}
	}
	got := decide.StackedFields(ctx, "response", decide.Fields{}, own)
	want := decide.Fields{
		Policy:     `"other";q=9, "a";q=5;w=3600, "b";q=5;w=3600, "d";q=1`,
		RateLimit:  `"other";r=8, "a";r=5;t=0, "b";r=5;t=0, "d";r=0`,
		RetryAfter: "60",
	}
	if got != want {
		t.Errorf("stacked fields\n%+v\nwant\n%+v", got, want)
	}
}
