package failover_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
)

// TestAdjustModes: an adjustment goes to the primary while it answers
// (and is shown to the fallback), and to the request's mode when it does
// not: the fallback adjusts its share and owes a charge to the primary,
// open counts nothing, closed fails.
func TestAdjustModes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFaultStore(t)
		s := newStore(t, p, failover.Config{ConsecutiveFailures: -1, FailureRatio: -1, FallbackScale: 0.5})
		l := sluice.FixedWindow(10, time.Hour) // in the fallback: 5
		adjust := func(key string, delta int64, m sluice.FailureMode) (sluice.Decision, error) {
			return s.Adjust(ctx, sluice.Request{Key: key, Limit: l, Cost: delta, OnError: m})
		}
		if d, err := adjust("u", 4, failover.Fallback); err != nil || d.Degraded || d.Remaining != 6 {
			t.Fatalf("on the primary: %+v %v", d, err)
		}
		p.set(errDown, false)
		// The fallback saw the 4: a further 3 leaves it 2 in debt (5 - 7).
		if d, err := adjust("u", 3, failover.Fallback); err != nil || !d.Degraded || d.Allowed || d.Remaining != 0 {
			t.Fatalf("fallback: %+v %v", d, err)
		}
		if d, err := adjust("u", -1, failover.Fallback); err != nil || !d.Degraded || d.Allowed {
			t.Fatalf("fallback refund: %+v %v", d, err) // 6 of 5: still refused
		}
		if d, err := adjust("v", 5, failover.FailOpen); err != nil || !d.Degraded || !d.Allowed || d.Remaining != 10 {
			t.Fatalf("open: %+v %v", d, err)
		}
		if _, err := adjust("v", 5, failover.FailClosed); !errors.Is(err, failover.ErrUnavailable) {
			t.Fatalf("closed: %v", err)
		}
		p.set(nil, false)
		if _, err := adjust("other", 1, failover.Fallback); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the debts are charged: u owes 3 - 1 = 2
		d, err := adjust("u", 0, failover.Fallback)
		if err != nil || d.Remaining != 4 {
			t.Fatalf("after recovery: %+v %v; want 4 left (10 - 4 - 2 owed)", d, err)
		}
	})
}

// TestAdjustNeedsAdjusters: a primary that cannot adjust makes every
// adjustment fail with ErrNotAdjustable, and that is not the primary's
// failure.
func TestAdjustNeedsAdjusters(t *testing.T) {
	p := newFaultStore(t)
	s := newStore(t, takeOnly{p}, failover.Config{})
	_, err := s.Adjust(ctx, sluice.Request{Key: "k", Limit: lim, Cost: 1})
	if !errors.Is(err, sluice.ErrNotAdjustable) {
		t.Fatalf("got %v, want ErrNotAdjustable", err)
	}
	s2 := newStore(t, p, failover.Config{})
	_, err = s2.Adjust(ctx, sluice.Request{Key: "k", Limit: sluice.Concurrency(2, time.Second), Cost: 1})
	if !errors.Is(err, sluice.ErrNotAdjustable) {
		t.Fatalf("concurrency: got %v, want ErrNotAdjustable", err)
	}
	if st := s2.Stats(); st.Failures != 0 {
		t.Fatalf("stats %+v: a request no store can adjust counted as a failure", st)
	}
}

// TestDebtsOutliveAFailedCharge: what the fallback admitted is still owed
// when charging it fails (the primary stalls again), and is charged after
// the primary's next success; it was forgotten.
func TestDebtsOutliveAFailedCharge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFaultStore(t)
		s := newStore(t, p, failover.Config{ConsecutiveFailures: -1, FailureRatio: -1})
		l := sluice.FixedWindow(10, time.Hour)
		take := func(key string) sluice.Decision {
			t.Helper()
			d, err := s.Take(ctx, sluice.Request{Key: key, Limit: l, Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		p.set(errDown, false)
		for range 6 {
			if d := take("u"); !d.Allowed || !d.Degraded {
				t.Fatalf("fallback: %+v", d)
			}
		}
		p.set(nil, false)
		p.adjustDown.Store(true)
		take("other") // the primary answers; charging the debts fails
		synctest.Wait()
		p.adjustDown.Store(false)
		take("other") // answers again: the debts are charged now
		synctest.Wait()
		n := 0
		for take("u").Allowed {
			n++
		}
		if n != 4 {
			t.Fatalf("u admitted %d on the primary after 6 in the fallback, want 4", n)
		}
	})
}

// takeOnly hides a store's Adjust.
type takeOnly struct{ sluice.Store }
