package decide_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
)

// newDecider returns a Decider on a fresh memstore reading the exact clock
// (the tests count delays to the microsecond), and the store.
func newDecider(t *testing.T, cfg decide.Config) (*decide.Decider, *memstore.Store) {
	t.Helper()
	mem, err := memstore.New(memstore.Config{Resolution: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	cfg.Logger = slog.New(slog.DiscardHandler)
	dc, err := decide.New(sluice.New(mem), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dc, mem
}

func check(name string, n int64) decide.Check {
	return decide.Check{Name: name, Key: string(decide.AppendKey(nil, name)), Limit: sluice.FixedWindow(n, time.Hour), Cost: 1}
}

// remaining peeks at what is left of a check's limit.
func remaining(t *testing.T, mem *memstore.Store, c decide.Check) int64 {
	t.Helper()
	d, err := sluice.New(mem).AllowN(context.Background(), c.Key, c.Limit, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// TestRunPlanningErrors: a check that could not be planned never lets the
// request past the other limits uncounted. Open: it alone is left out and
// the rest are charged; closed: the request is refused and nothing is
// charged; a client's error: Invalid, nothing charged.
func TestRunPlanningErrors(t *testing.T) {
	keyErr := errors.New("no tenant")
	for _, tc := range []struct {
		name    string
		bad     decide.Check
		outcome decide.Outcome
		charged bool // the good check was charged
	}{
		{"open", decide.Check{Name: "bad", OnError: sluice.FailOpen, Err: keyErr}, decide.AdmittedUncounted, true},
		{"default", decide.Check{Name: "bad", Err: keyErr}, decide.AdmittedUncounted, true},
		{"fallback", decide.Check{Name: "bad", OnError: sluice.FailFallback, Err: keyErr}, decide.AdmittedUncounted, true},
		{"closed", decide.Check{Name: "bad", OnError: sluice.FailClosed, Err: keyErr}, decide.Failed, false},
		{"client", decide.Check{Name: "bad", Err: &decide.ClientError{Field: "header X-Cost", Reason: "not a number"}}, decide.Invalid, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dc, mem := newDecider(t, decide.Config{})
			good := check("good", 10)
			var res decide.Result
			dc.Run(context.Background(), []decide.Check{good, tc.bad}, &res)
			if res.Outcome != tc.outcome || res.Err == nil {
				t.Fatalf("outcome %v, err %v; want %v and an error", res.Outcome, res.Err, tc.outcome)
			}
			if got := remaining(t, mem, good); (got == 9) != tc.charged {
				t.Fatalf("good check has %d left; charged: want %t", got, tc.charged)
			}
			if len(res.Observed) == 0 || res.Observed[0].Limit != "bad" || res.Observed[0].Err == nil {
				t.Fatalf("observed %+v, want the bad check first", res.Observed)
			}
		})
	}
}

// failing is a store whose every call fails as a store failure does.
type failing struct{ err error }

func (f failing) Take(context.Context, sluice.Request) (sluice.Decision, error) {
	return sluice.Decision{}, f.err
}
func (f failing) TakeAll(context.Context, []sluice.Request, []sluice.Decision) error { return f.err }
func (f failing) Release(context.Context, sluice.Request, uint64) error              { return f.err }

// TestRunStoreErrors: a store failure follows the checks' failure modes
// (any closed one refuses), and a limit or cost no store could check is
// never admitted, whatever the mode.
func TestRunStoreErrors(t *testing.T) {
	down := errors.New("connection refused")
	for _, tc := range []struct {
		name    string
		err     error
		modes   []sluice.FailureMode
		cfg     sluice.FailureMode
		outcome decide.Outcome
	}{
		{"open by default", down, []sluice.FailureMode{0, 0}, 0, decide.AdmittedUncounted},
		{"closed by config", down, []sluice.FailureMode{0, 0}, sluice.FailClosed, decide.Failed},
		{"one closed check", down, []sluice.FailureMode{sluice.FailOpen, sluice.FailClosed}, 0, decide.Failed},
		{"invalid limit, open", sluice.ErrInvalidLimit, []sluice.FailureMode{sluice.FailOpen, sluice.FailOpen}, 0, decide.Failed},
		{"cost over capacity, open", sluice.ErrCostExceedsCapacity, []sluice.FailureMode{sluice.FailOpen, 0}, 0, decide.Failed},
		{"negative max delay, open", sluice.ErrNegativeMaxDelay, []sluice.FailureMode{sluice.FailOpen, 0}, 0, decide.Failed},
		{"not adjustable, open", sluice.ErrNotAdjustable, []sluice.FailureMode{0, 0}, 0, decide.Failed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dc, err := decide.New(sluice.New(failing{tc.err}), decide.Config{OnError: tc.cfg, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			a, b := check("a", 1), check("b", 1)
			a.OnError, b.OnError = tc.modes[0], tc.modes[1]
			var res decide.Result
			dc.Run(context.Background(), []decide.Check{a, b}, &res)
			if res.Outcome != tc.outcome || !errors.Is(res.Err, tc.err) {
				t.Fatalf("outcome %v (%v), want %v", res.Outcome, res.Err, tc.outcome)
			}
			if res.Proceed() != (tc.outcome == decide.AdmittedUncounted) {
				t.Fatalf("Proceed %t for %v", res.Proceed(), res.Outcome)
			}
		})
	}
}

// TestRunFailoverOpen: a request a failure mode admitted without counting
// it (failover's open mode while the store is down) is AdmittedUncounted,
// as when the store's error reaches decide, never Admitted: one outcome for
// one thing, whichever layer applied the mode; and it is degraded.
func TestRunFailoverOpen(t *testing.T) {
	fs, err := failover.New(failing{errors.New("connection refused")}, failover.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dc, err := decide.New(sluice.New(fs), decide.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c := check("a", 1)
	c.OnError = sluice.FailOpen
	var res decide.Result
	dc.Run(context.Background(), []decide.Check{c}, &res)
	if res.Outcome != decide.AdmittedUncounted || !res.Proceed() || len(res.Observed) != 1 ||
		res.Observed[0].Outcome != decide.AdmittedUncounted || !res.Observed[0].Decision.Degraded {
		t.Fatalf("outcome %v, observed %+v; want admitted_uncounted, degraded", res.Outcome, res.Observed)
	}
	if got := decide.AdmittedUncounted.String(); got != "admitted_uncounted" {
		t.Fatalf("the outcome is named %q", got)
	}
}

// TestRunDecides: all or nothing, the check that decided, shadow checks
// only after an admission, and leases given back by Release.
func TestRunDecides(t *testing.T) {
	dc, mem := newDecider(t, decide.Config{})
	ctx := context.Background()
	wide, narrow := check("wide", 10), check("narrow", 2)
	shadow := check("shadow", 1)
	shadow.Shadow = true
	conc := decide.Check{Name: "conc", Key: "conc", Limit: sluice.Concurrency(1, time.Minute), Cost: 1}
	checks := []decide.Check{wide, narrow, shadow, conc}
	var res decide.Result
	want := []struct {
		outcome decide.Outcome
		decided string
		shadow  decide.Outcome // the shadow observation, if any
	}{
		{decide.Admitted, "conc", decide.ShadowAdmitted},
		{decide.Admitted, "narrow", decide.ShadowRefused}, // narrow and conc both at 0: the first
		{decide.Refused, "narrow", 0},
	}
	for i, w := range want {
		dc.Run(ctx, checks, &res)
		if res.Outcome != w.outcome || res.DecidedBy() == nil || res.DecidedBy().Name != w.decided {
			t.Fatalf("request %d: %v by %+v, want %v by %s", i, res.Outcome, res.DecidedBy(), w.outcome, w.decided)
		}
		var sh decide.Outcome
		for _, o := range res.Observed[1:] {
			sh = o.Outcome
		}
		if sh != w.shadow {
			t.Fatalf("request %d: shadow observation %v, want %v (%+v)", i, sh, w.shadow, res.Observed)
		}
		res.Release() // the concurrency lease, so the next request fits
	}
	// The refused third request charged nothing: wide has 8 left, not 7;
	// the shadow limit counted only the first request.
	if got := remaining(t, mem, wide); got != 8 {
		t.Fatalf("wide has %d left after a refused request, want 8", got)
	}
	if got := remaining(t, mem, shadow); got != 0 {
		t.Fatalf("shadow has %d left, want 0", got)
	}
	f := res.Fields()
	if f.Policy != `"wide";q=10;w=3600, "narrow";q=2;w=3600, "conc";q=1` || f.RetryAfter == "" {
		t.Fatalf("fields %+v", f)
	}
}

// TestRunWaits: with Config.Wait, an Action.Wait check waits for room up
// to its MaxDelay; without it, Run refuses at once.
func TestRunWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, wait := range []bool{true, false} {
			dc, _ := newDecider(t, decide.Config{Wait: wait})
			c := decide.Check{Name: "tb", Key: "tb", Limit: sluice.TokenBucket(sluice.PerSecond(10), 1), Cost: 1,
				Action: &decide.Action{Wait: true, MaxDelay: 500 * time.Millisecond}}
			var res decide.Result
			dc.Run(context.Background(), []decide.Check{c}, &res)
			start := time.Now()
			dc.Run(context.Background(), []decide.Check{c}, &res)
			took := time.Since(start)
			switch {
			case wait && (res.Outcome != decide.Delayed || took != 100*time.Millisecond):
				t.Fatalf("waiting: %v after %s, want delayed after 100ms", res.Outcome, took)
			case !wait && (res.Outcome != decide.Refused || took != 0):
				t.Fatalf("not waiting: %v after %s, want refused at once", res.Outcome, took)
			}
		}
	})
}

// TestRunShadowEachOnItsOwn: a tight shadow limit that would refuse does
// not keep a loose one from counting, and neither changes the outcome.
func TestRunShadowEachOnItsOwn(t *testing.T) {
	dc, mem := newDecider(t, decide.Config{})
	tight, loose := check("tight", 1), check("loose", 10)
	tight.Shadow, loose.Shadow = true, true
	var res decide.Result
	for range 3 {
		dc.Run(context.Background(), []decide.Check{tight, loose}, &res)
		if res.Outcome != decide.Admitted {
			t.Fatalf("outcome %v: shadow limits changed it", res.Outcome)
		}
	}
	if got := remaining(t, mem, loose); got != 7 {
		t.Fatalf("loose shadow limit has %d left, want 7 (counted every request)", got)
	}
	if len(res.Observed) != 2 || res.Observed[0].Outcome != decide.ShadowRefused || res.Observed[0].Limit != "tight" ||
		res.Observed[1].Outcome != decide.ShadowAdmitted || res.Observed[1].Limit != "loose" {
		t.Fatalf("observed %+v, want tight's shadow refusal and loose's shadow admission", res.Observed)
	}
}

// TestRunWaitingLineFull: a request that would be delayed while the
// waiting line is full is refused without being charged: it takes no place
// in the shaper's queue that a later request could have had.
func TestRunWaitingLineFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dc, _ := newDecider(t, decide.Config{Wait: true, MaxWaiting: 1, MaxDelay: 300 * time.Millisecond})
		shaped := decide.Check{Name: "shaped", Key: "shaped", Limit: sluice.LeakyBucket(sluice.PerSecond(10), 5), Cost: 1}
		run := func() decide.Outcome {
			var res decide.Result
			dc.Run(context.Background(), []decide.Check{shaped}, &res)
			return res.Outcome
		}
		if o := run(); o != decide.Admitted { // the bucket's first request: no delay
			t.Fatalf("first: %v", o)
		}
		done := make(chan decide.Outcome)
		go func() { done <- run() }() // delayed 100ms, holding the only place in line
		synctest.Wait()
		if o := run(); o != decide.Refused {
			t.Fatalf("with the line full: %v, want refused", o)
		}
		if o := <-done; o != decide.Delayed {
			t.Fatalf("the waiting request: %v, want delayed", o)
		}
		// Two were charged (the first and the delayed one), not three: the
		// next request waits 100ms after the delayed one, not 200ms.
		start := time.Now()
		if o := run(); o != decide.Delayed || time.Since(start) != 100*time.Millisecond {
			t.Fatalf("next: %v after %s, want delayed 100ms", o, time.Since(start))
		}
	})
}

// TestRunOnWaiting: Config.OnWaiting counts a request waiting for its
// shaping delay while it waits, and no longer once it goes on.
func TestRunOnWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		waiting := map[string]int{}
		dc, _ := newDecider(t, decide.Config{Wait: true, OnWaiting: func(limit string, delta int) {
			mu.Lock()
			waiting[limit] += delta
			mu.Unlock()
		}})
		shaped := decide.Check{Name: "shaped", Key: "shaped", Limit: sluice.LeakyBucket(sluice.PerSecond(10), 5), Cost: 1}
		run := func() {
			var res decide.Result
			dc.Run(context.Background(), []decide.Check{shaped}, &res)
		}
		run() // no delay
		go run()
		go run()
		synctest.Wait() // both asleep in their delays
		mu.Lock()
		if waiting["shaped"] != 2 {
			t.Errorf("while two wait: %v, want shaped: 2", waiting)
		}
		mu.Unlock()
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if waiting["shaped"] != 0 {
			t.Errorf("after the delays: %v, want shaped: 0", waiting)
		}
	})
}

// TestNearLimit: admitted with at least 80% of the limit used is near it;
// refusals, failures and decisions without a limit are not.
func TestNearLimit(t *testing.T) {
	for _, tc := range []struct {
		outcome          decide.Outcome
		limit, remaining int64
		want             bool
	}{
		{decide.Admitted, 10, 3, false}, // 70% used
		{decide.Admitted, 10, 2, true},  // 80%
		{decide.Admitted, 10, 0, true},  // 100%
		{decide.Delayed, 5, 1, true},    // 80%
		{decide.Admitted, 3, 1, false},  // 67%
		{decide.Refused, 10, 0, false},  // refused, not near
		{decide.Admitted, 0, 0, false},  // no limit (a degraded admission)
		{decide.ShadowAdmitted, 10, 0, false},
	} {
		o := decide.Observation{Outcome: tc.outcome, Decision: sluice.Decision{
			Allowed: tc.outcome != decide.Refused, Limit: tc.limit, Remaining: tc.remaining}}
		if got := decide.NearLimit(o); got != tc.want {
			t.Errorf("%v with %d of %d left: NearLimit %t, want %t", tc.outcome, tc.remaining, tc.limit, got, tc.want)
		}
	}
}
