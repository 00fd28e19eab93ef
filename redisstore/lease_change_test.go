package redisstore_test

import (
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
	if err := s.Reset(ctx, "k", lim); err != nil {
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

// TestTakeHeldUnderAChangedLimit: while Redis cannot be reached (package
// failover), a lease taken under the key's previous limit is not spent
// for a request under the new one: it could not be given back first, and
// its units would be spent beyond the new limit's room.
func TestTakeHeldUnderAChangedLimit(t *testing.T) {
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
	ds := make([]sluice.Decision, 1)
	if s.TakeHeld([]sluice.Request{{Key: "k", Limit: after, Cost: 1}}, ds) {
		t.Error("a lease taken under the previous limit was spent under the new one")
	}
	if !s.TakeHeld([]sluice.Request{{Key: "k", Limit: before, Cost: 1}}, ds) {
		t.Error("the lease was not spent under the limit it was taken under")
	}
}
