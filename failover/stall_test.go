package failover_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

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
