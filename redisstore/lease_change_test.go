package redisstore_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// TestLeaseLimitChange: a limit that changes while an instance holds a
// quota lease of it (a reload lowering a quota) carries over exactly as a
// take does: the units the lease held go back under the limit they were
// taken under before the new limit is asked for, so the instance admits
// under the new limit what memstore, which has no leases, admits, and the
// held units are not spent beyond it. The buckets refill one request an
// hour: the two minutes the test's clock advances refill none.
func TestLeaseLimitChange(t *testing.T) {
	for _, c := range []struct{ before, after sluice.Limit }{
		{sluice.TokenBucket(sluice.PerHour(1), 100), sluice.TokenBucket(sluice.PerHour(1), 25)},
		{sluice.GCRA(sluice.PerHour(1), 100), sluice.GCRA(sluice.PerHour(1), 25)},
		{sluice.FixedWindow(100, time.Hour), sluice.FixedWindow(25, time.Hour)},
		{sluice.FixedWindow(100, time.Hour), sluice.FixedWindow(25, 2*time.Hour)},
		{sluice.FixedWindow(100, time.Hour), sluice.CalendarWindow(25, sluice.Day, "Europe/Berlin")},
	} {
		t.Run(c.after.String(), func(t *testing.T) {
			var us atomic.Int64 // read by the leases' background calls too
			us.Store(time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC).UnixMicro())
			now := func() time.Time { return time.UnixMicro(us.Load()) }
			red := newStore(t, redistest.Standalone(t), redisstore.Config{Now: now,
				Leases: redisstore.LeaseConfig{Enabled: true, Share: 1, Traffic: time.Second, Hold: time.Hour}})
			mem, err := memstore.New(memstore.Config{Now: now, SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			// n requests, step apart: a step of 3 Traffics makes the
			// lease ask for one unit at a time, which a bucket has
			// room for as long as memstore's has
			admit := func(lim sluice.Limit, n int, step time.Duration) (r, m int) {
				for range n {
					us.Add(step.Microseconds())
					dr, err := red.Take(ctx, sluice.Request{Key: "k", Limit: lim, Cost: 1})
					if err != nil {
						t.Fatal(err)
					}
					dm, _ := mem.Take(ctx, sluice.Request{Key: "k", Limit: lim, Cost: 1})
					if dr.Allowed {
						r++
					}
					if dm.Allowed {
						m++
					}
				}
				return r, m
			}
			if r, m := admit(c.before, 20, 0); r != 20 || m != 20 {
				t.Fatalf("under %s: redisstore admitted %d of 20, memstore %d", c.before, r, m)
			}
			redisstore.SettleLeases(red)
			if held := redisstore.HeldFor(red, "k", c.before); held == 0 {
				t.Fatal("the instance holds no lease: the test checks nothing")
			}
			r, m := admit(c.after, 40, 3*time.Second)
			if r != m || m != 5 {
				t.Errorf("under %s after 20 admitted: redisstore admitted %d, memstore %d, want 5", c.after, r, m)
			}
		})
	}
}

// TestLeaseReset: a reset key starts afresh on an instance that held a
// quota lease of it: the units the lease held are dropped with the state
// that counted them, so the instance admits the limit once more, not more.
func TestLeaseReset(t *testing.T) {
	at := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	s := newStore(t, redistest.Standalone(t), redisstore.Config{Now: func() time.Time { return at },
		Leases: redisstore.LeaseConfig{Enabled: true, Share: 1, Traffic: time.Hour, Hold: time.Hour}})
	lim := sluice.FixedWindow(30, time.Hour)
	for range 10 {
		if d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: lim, Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	}
	redisstore.SettleLeases(s)
	if redisstore.HeldFor(s, "k", lim) == 0 {
		t.Fatal("the instance holds no lease: the test checks nothing")
	}
	if err := s.Reset(ctx, sluice.Request{Key: "k", Limit: lim}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for range 60 {
		d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: lim, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			n++
		}
	}
	if n != 30 {
		t.Errorf("admitted %d after the reset, want the limit's 30", n)
	}
}

// TestTakeLocalUnderAChangedLimit: decided in the process (package
// failover asks first, and while Redis cannot be reached), a lease taken
// under the key's previous limit is not spent
// for a request under the new one: it could not be given back first, and
// its units would be spent beyond the new limit's room.
func TestTakeLocalUnderAChangedLimit(t *testing.T) {
	at := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	s := newStore(t, redistest.Standalone(t), redisstore.Config{Now: func() time.Time { return at },
		Leases: redisstore.LeaseConfig{Enabled: true, Share: 1, Traffic: time.Hour, Hold: time.Hour}})
	before, after := sluice.FixedWindow(100, time.Hour), sluice.FixedWindow(25, time.Hour)
	for range 20 {
		if d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: before, Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	}
	redisstore.SettleLeases(s)
	if redisstore.HeldFor(s, "k", before) == 0 {
		t.Fatal("the instance holds no lease: the test checks nothing")
	}
	var p redisstore.Prepared
	if _, ok := s.TakeLocal(sluice.Request{Key: "k", Limit: after, Cost: 1}, &p); ok {
		t.Error("a lease taken under the previous limit was spent under the new one")
	}
	if d, ok := s.TakeLocal(sluice.Request{Key: "k", Limit: before, Cost: 1}, &p); !ok || !d.Allowed {
		t.Errorf("the lease was not spent under the limit it was taken under: %+v, %v", d, ok)
	}
}

// TestTakeAllLocal: a check is decided in the process only as a whole:
// every request covered by the lease its instance holds, or one refusal
// the near cache remembers. Otherwise nothing is spent from any lease,
// and TakeAll decides it with Redis.
func TestTakeAllLocal(t *testing.T) {
	at := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	s := newStore(t, redistest.Standalone(t), redisstore.Config{Now: func() time.Time { return at },
		Leases: redisstore.LeaseConfig{Enabled: true, Share: 1, Traffic: time.Hour, Hold: time.Hour}})
	lim := sluice.FixedWindow(100, time.Hour)
	req := func(key string) sluice.Request { return sluice.Request{Key: key, Limit: lim, Cost: 1} }
	warm := func(key string) int64 {
		for range 20 {
			if d, err := s.Take(ctx, req(key)); err != nil || !d.Allowed {
				t.Fatalf("%s: %+v %v", key, d, err)
			}
		}
		redisstore.SettleLeases(s)
		held := redisstore.HeldFor(s, key, lim)
		if held < 2 {
			t.Fatalf("%s: the instance holds %d units: the test checks nothing", key, held)
		}
		return held
	}
	heldA := warm("a")
	ds, p := make([]sluice.Decision, 2), new(redisstore.Prepared)
	if s.TakeAllLocal([]sluice.Request{req("a"), req("b")}, ds, p) {
		t.Error(`a check with "b", which holds no lease, was decided in the process`)
	}
	if got := redisstore.HeldFor(s, "a", lim); got != heldA {
		t.Errorf(`"a" holds %d units after a check not decided, want %d: nothing spent`, got, heldA)
	}
	heldB := warm("b")
	big := req("b")
	big.Cost = heldB + 1 // more than b's lease holds
	if s.TakeAllLocal([]sluice.Request{req("a"), big}, ds, p) {
		t.Errorf("a check b's lease cannot cover (%d units, %d held) was decided in the process", big.Cost, heldB)
	}
	if a, b := redisstore.HeldFor(s, "a", lim), redisstore.HeldFor(s, "b", lim); a != heldA || b != heldB {
		t.Errorf("held after a check not decided: a %d, b %d, want %d and %d: nothing spent", a, b, heldA, heldB)
	}
	if !s.TakeAllLocal([]sluice.Request{req("a"), req("b")}, ds, p) || !ds[0].Allowed || !ds[1].Allowed {
		t.Fatalf("a check both leases cover: %+v", ds)
	}
	if a, b := redisstore.HeldFor(s, "a", lim), redisstore.HeldFor(s, "b", lim); a != heldA-1 || b != heldB-1 {
		t.Errorf("held after the check: a %d, b %d, want %d and %d", a, b, heldA-1, heldB-1)
	}
	if s.TakeAllLocal([]sluice.Request{req("a"), req("a")}, ds, p) {
		t.Error("a check naming one key twice was decided in the process; TakeAll reports it")
	}

	// A refusal Redis gave a lease call is remembered, and refuses a check
	// in the process.
	strict := sluice.Request{Key: "c", Limit: sluice.FixedWindow(1, time.Hour), Cost: 1} // its lease call refuses the second
	if d, err := s.Take(ctx, strict); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	if d, err := s.Take(ctx, strict); err != nil || d.Allowed {
		t.Fatalf("the second request of a burst of 1: %+v %v", d, err)
	}
	if !s.TakeAllLocal([]sluice.Request{req("a"), strict}, ds, p) || ds[0].Allowed || ds[1].Allowed || ds[1].RetryAfter <= 0 {
		t.Errorf("a check with a remembered refusal: %+v, want refused in the process", ds)
	}
	if got := redisstore.HeldFor(s, "a", lim); got != heldA-1 {
		t.Errorf(`"a" holds %d units after a refused check, want %d`, got, heldA-1)
	}
}

// TestTakeLocalOnlyWhereALeaseCan: the local answer is given only for a
// request a lease can cover (package failover asks TakeLocal before its
// breaker, which counts the others' answers). A refusal the near cache
// remembers for a sliding window, which never leases, is the prepared
// Take's to give, after TakeLocal as in Store.Take.
func TestTakeLocalOnlyWhereALeaseCan(t *testing.T) {
	client := redistest.Standalone(t)
	for _, leases := range []bool{true, false} {
		s := newStore(t, client, redisstore.Config{Leases: redisstore.LeaseConfig{Enabled: leases}})
		r := sluice.Request{Key: fmt.Sprintf("sliding-%v", leases), Limit: sluice.SlidingWindow(1, time.Hour), Cost: 1}
		for range 2 {
			s.Take(ctx, r)
		}
		if d, err := s.Take(ctx, r); err != nil || d.Allowed {
			t.Fatalf("leases %v: the third request of a limit of 1: %+v %v", leases, d, err)
		}
		var p redisstore.Prepared
		if d, ok := s.TakeLocal(r, &p); ok {
			t.Errorf("leases %v: a sliding window was decided in the process: %+v", leases, d)
		}
		if d, err := p.Take(ctx); err != nil || d.Allowed || d.RetryAfter <= 0 {
			t.Errorf("leases %v: the prepared Take of the refused request: %+v %v", leases, d, err)
		}
	}
}

// TestTakeCoveredAllocs: Take of a request its lease covers looks the lease
// up by the state key's bytes and builds no string: it allocates nothing.
func TestTakeCoveredAllocs(t *testing.T) {
	s := newStore(t, redistest.Standalone(t), redisstore.Config{
		Leases: redisstore.LeaseConfig{Enabled: true, Hold: time.Hour, Traffic: time.Hour}})
	hot := sluice.Request{Key: "hot", Limit: sluice.TokenBucket(sluice.PerSecond(1_000_000), 1_000_000), Cost: 1}
	for range 100 { // the lease grows to cover what follows
		if d, err := s.Take(ctx, hot); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	before := s.LeaseStats().Local
	allocs := testing.AllocsPerRun(1000, func() {
		if d, err := s.Take(ctx, hot); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	})
	local := s.LeaseStats().Local - before
	t.Logf("%.1f allocations per decision; %d of 1001 decided from the lease", allocs, local)
	if local < 1001 {
		t.Errorf("%d of 1001 decided from the lease: the test measures something else", local)
	}
	if allocs > 0.5 { // a refill now and then allocates
		t.Errorf("%.1f allocations per decision from a lease, want 0", allocs)
	}
}

// TestPrepared: what TakeLocal or TakeAllLocal could not decide is decided
// on Redis as prepared, and a Prepared that holds nothing for the call
// made, or what preparing found wrong, is an error, never a decision.
func TestPrepared(t *testing.T) {
	s := newStore(t, redistest.Standalone(t), redisstore.Config{Leases: redisstore.LeaseConfig{Enabled: true}})
	lim := sluice.FixedWindow(2, time.Hour)
	r := sluice.Request{Key: "prepared", Limit: lim, Cost: 1}
	ds := make([]sluice.Decision, 2)
	var zero redisstore.Prepared
	if _, err := zero.Take(ctx); err == nil {
		t.Error("Take of a zero Prepared: no error")
	}
	if err := zero.TakeAll(ctx, ds); err == nil {
		t.Error("TakeAll of a zero Prepared: no error")
	}
	var p redisstore.Prepared
	if _, ok := s.TakeLocal(r, &p); ok {
		t.Fatal("a key never seen was decided in the process")
	}
	if err := p.TakeAll(ctx, ds); err == nil {
		t.Error("TakeAll of a request TakeLocal prepared: no error")
	}
	if d, err := p.Take(ctx); err != nil || !d.Allowed || d.Remaining != 1 {
		t.Errorf("Take as prepared: %+v %v, want admitted with 1 left", d, err)
	}
	big := r
	big.Cost = 3
	if _, ok := s.TakeLocal(big, &p); ok {
		t.Fatal("a cost above the capacity was decided in the process")
	}
	if d, err := p.Take(ctx); !errors.Is(err, sluice.ErrCostExceedsCapacity) || d.Allowed {
		t.Errorf("Take of a cost above the capacity: %+v %v, want ErrCostExceedsCapacity", d, err)
	}
	if s.TakeAllLocal([]sluice.Request{r, r}, ds, &p) {
		t.Fatal("a check naming one key twice was decided in the process")
	}
	if err := p.TakeAll(ctx, ds); !errors.Is(err, sluice.ErrDuplicateRequest) {
		t.Errorf("TakeAll of a check naming one key twice: %v, want ErrDuplicateRequest", err)
	}
	if s.TakeAllLocal([]sluice.Request{r}, ds, &p) || p.TakeAll(ctx, ds) == nil {
		t.Error("TakeAll with room for 2 decisions of a check of 1: no error")
	}
	for range 2 { // the second is refused by Redis, and remembered
		s.TakeLocal(r, &p)
		p.Take(ctx)
	}
	if d, ok := s.TakeLocal(r, &p); !ok || d.Allowed {
		t.Fatalf("a refusal the near cache remembers: %+v %v, want refused in the process", d, ok)
	}
	if d, err := p.Take(ctx); err == nil {
		t.Errorf("Take after TakeLocal decided: %+v, want an error (nothing is left for Redis)", d)
	}
}
