package failover_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
)

// stallRun drives s from workers goroutines on synctest's fake clock, their
// first calls spread over a millisecond, each pausing a millisecond between
// calls, for total; from stallAt, the primary fails for stall (with hang,
// each call blocks until its deadline, as in a SIGSTOP of Redis; without,
// it fails at once, as a dead server refuses connections). It returns when,
// counted from stallAt, the breaker first opened (-1: never).
func stallRun(t *testing.T, p *faultStore, s *failover.Store, workers int, hang bool, stallAt, stall, total time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	opened := time.Duration(-1)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * time.Millisecond / time.Duration(workers))
			for time.Since(t0) < total {
				s.Take(ctx, unit)
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Go(func() {
		time.Sleep(stallAt)
		p.set(errDown, hang)
		for time.Since(t0) < stallAt+stall {
			mu.Lock()
			if opened < 0 && s.State() != failover.StateClosed {
				opened = time.Since(t0) - stallAt
			}
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
		p.set(nil, false)
	})
	wg.Wait()
	return opened
}

// TestStallCountsOnce: a 100 ms stall under a 50 ms deadline fails every
// call in flight, 32 at a time, about twice over, and the breaker stays
// closed: the calls that failed together count as one failure, and only a
// call made after a failure was seen counts as the next. Before, the first
// 5 of the 32 timeouts opened the breaker for a second (the probe
// interval), and every request of that second was decided by its failure
// mode though Redis had answered again 100 ms in.
func TestStallCountsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFaultStore(t)
		s := newStore(t, p, failover.Config{Timeout: 50 * time.Millisecond})
		opened := stallRun(t, p, s, 32, true, 200*time.Millisecond, 100*time.Millisecond, time.Second)
		st := s.Stats()
		t.Logf("stats %+v", st)
		if opened >= 0 || st.Opens != 0 {
			t.Fatalf("a 100 ms stall opened the breaker %v in (stats %+v)", opened, st)
		}
		if st.Failures < 32 {
			t.Fatalf("%d failed calls: the stall was not exercised", st.Failures)
		}
	})
}

// TestLongStallOpens: a stall that lasts opens the breaker after the 5
// failures of 5 successive deadlines, 250 ms and a few pauses in, and a
// dead server that refuses at once opens it within a few milliseconds,
// however many calls are in flight.
func TestLongStallOpens(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hang     bool
		min, max time.Duration
	}{
		{"frozen", true, 250 * time.Millisecond, 260 * time.Millisecond},
		{"refusing", false, 0, 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newFaultStore(t)
				s := newStore(t, p, failover.Config{Timeout: 50 * time.Millisecond, ProbeInterval: 10 * time.Second})
				opened := stallRun(t, p, s, 32, tc.hang, 200*time.Millisecond, time.Second, 1300*time.Millisecond)
				t.Logf("opened %v into the fault; stats %+v", opened, s.Stats())
				if opened < tc.min || opened > tc.max {
					t.Fatalf("opened %v into the fault, want %v to %v", opened, tc.min, tc.max)
				}
			})
		})
	}
}

// TestRatioCountsACrowdOnce: 30 calls failing together at one moment are
// one failure for the failure ratio too; failures that recur over time
// still open it (TestOpensOnFailureRatio).
func TestRatioCountsACrowdOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFaultStore(t)
		s := newStore(t, p, failover.Config{Timeout: 50 * time.Millisecond, ConsecutiveFailures: -1, FailureRatio: 0.5, MinCalls: 20})
		p.set(errDown, true)
		var wg sync.WaitGroup
		for range 30 {
			wg.Go(func() { s.Take(ctx, unit) })
		}
		wg.Wait()
		p.set(nil, false)
		if st := s.Stats(); st.Opens != 0 || st.Failures != 30 {
			t.Fatalf("stats %+v: 30 calls failing at one moment opened the breaker", st)
		}
	})
}

// TestFallbackIsWarm: the fallback store sees the requests the primary
// decides, so when the primary fails it goes on from their counts: a
// client that used its burst on the primary gets no second burst from the
// fallback. Fallback is the mode of a zero Config. Concurrency limits are
// not shown to it (their leases would never be released).
func TestFallbackIsWarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFaultStore(t)
		s := newStore(t, p, failover.Config{FallbackScale: 0.5})
		bucket := sluice.TokenBucket(sluice.PerMinute(1), 20) // in fallback: burst 10
		conc := sluice.Concurrency(4, time.Minute)            // in fallback: 2
		for range 8 {
			if d, err := s.Take(ctx, sluice.Request{Key: "u", Limit: bucket, Cost: 1}); err != nil || !d.Allowed || d.Degraded {
				t.Fatalf("on the primary: %+v, %v", d, err)
			}
		}
		for range 2 {
			ds := make([]sluice.Decision, 1)
			if err := s.TakeAll(ctx, []sluice.Request{{Key: "c", Limit: conc, Cost: 1}}, ds); err != nil || !ds[0].Allowed {
				t.Fatalf("concurrency on the primary: %+v, %v", ds[0], err)
			}
		}
		p.set(errDown, false)
		admitted := 0
		for range 10 {
			d, err := s.Take(ctx, sluice.Request{Key: "u", Limit: bucket, Cost: 1})
			if err != nil || !d.Degraded {
				t.Fatalf("with the primary down: %+v, %v", d, err)
			}
			if d.Allowed {
				admitted++
			}
		}
		// The fallback's burst of 10 less the 8 it saw.
		if admitted != 2 {
			t.Errorf("the fallback admitted %d after 8 on the primary, want 2 (burst 10 - 8)", admitted)
		}
		if d, err := s.Take(ctx, sluice.Request{Key: "c", Limit: conc, Cost: 1}); err != nil || !d.Allowed || !d.Degraded {
			t.Errorf("concurrency with the primary down: %+v, %v; want a degraded admission (no lease was shadowed)", d, err)
		}
		if st := s.Stats(); st.DegradedFallback != 11 {
			t.Errorf("stats %+v, want 11 fallback decisions (the zero Config's mode)", st)
		}
	})
}

// TestFallbackAdmissionsCountOnce: what the fallback admitted while the
// primary could not decide is charged to the primary after its next
// success, so a limit does not admit a stall's requests twice, once locally
// and once more from the primary's refilled counts. A debt larger than the
// room left is charged past it (sluice.Adjuster), up to
// sluice.AdjustCapacities capacities: the requests after it pay for it
// before any is admitted.
func TestFallbackAdmissionsCountOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFaultStore(t)
		s := newStore(t, p, failover.Config{ConsecutiveFailures: -1, FailureRatio: -1, FallbackScale: 2})
		bucket := sluice.TokenBucket(sluice.PerMinute(1), 10) // in the fallback: burst 20
		take := func(key string) sluice.Decision {
			t.Helper()
			d, err := s.Take(ctx, sluice.Request{Key: key, Limit: bucket, Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		for range 3 { // b has 7 left on the primary
			take("b")
		}
		p.set(errDown, false)
		for i := range 12 { // the fallback admits 6 of a and 12 of b
			if i < 6 {
				if d := take("a"); !d.Allowed || !d.Degraded {
					t.Fatalf("fallback: %+v", d)
				}
			}
			if d := take("b"); !d.Allowed || !d.Degraded {
				t.Fatalf("fallback: %+v", d)
			}
		}
		p.set(nil, false)
		take("other") // the primary answers: the debts are charged
		synctest.Wait()
		left := func(key string) int {
			n := 0
			for take(key).Allowed {
				n++
			}
			return n
		}
		if a, b := left("a"), left("b"); a != 4 || b != 0 {
			t.Errorf("left on the primary: a %d, b %d; want 4 (10 less 6 owed) and 0 (7 left, 12 owed)", a, b)
		}
		// b owes 5 past empty (7 left, 12 charged): the first 5
		// minutes of refill pay them back.
		time.Sleep(5 * time.Minute)
		if b := left("b"); b != 0 {
			t.Errorf("b admitted %d 5 minutes after a debt of 5 past empty, want 0", b)
		}
		time.Sleep(time.Minute)
		if b := left("b"); b != 1 {
			t.Errorf("b admitted %d once its debt was paid and a minute refilled, want 1", b)
		}
	})
}
