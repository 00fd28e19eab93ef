package failover_test

import (
	"github.com/sluicehq/sluice/memstore"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestLeaseIsFallbackBudget: while Redis is down and the breaker open, an
// instance with quota leases admits what it holds, exactly (not
// degraded), before its failure mode (here closed) decides.
func TestLeaseIsFallbackBudget(t *testing.T) {
	noLeaks(t)
	p := redistest.StartProcess(t)
	rs, err := redisstore.New(p.Client(clientOptions()), redisstore.Config{
		Leases: redisstore.LeaseConfig{Enabled: true, Hold: time.Hour}, // nothing given back during the test
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	s := newStore(t, rs, failover.Config{ConsecutiveFailures: 1, ProbeInterval: time.Hour, Mode: modeAll(failover.FailClosed)})
	hot := sluice.Request{Key: "hot", Limit: sluice.GCRA(sluice.PerHour(1), 1600), Cost: 1}
	for range 300 { // traffic enough for the leases to grow past one unit
		if d, err := s.Take(ctx, hot); err != nil || !d.Allowed {
			t.Fatalf("before the outage: %+v, %v", d, err)
		}
	}
	p.Kill()
	other := sluice.Request{Key: "other", Limit: hot.Limit, Cost: 1}
	if _, err := s.Take(ctx, other); err == nil { // no lease: Redis is asked, fails, the breaker opens
		t.Fatal("a key without a lease was decided while Redis is down")
	}
	if st := s.State(); st != failover.StateOpen {
		t.Fatalf("breaker %v, want open", st)
	}
	var admitted int64
	for {
		d, err := s.Take(ctx, hot)
		if err != nil {
			break // the lease is spent: fail closed
		}
		if !d.Allowed || d.Degraded {
			t.Fatalf("from the lease: %+v, want admitted, not degraded", d)
		}
		admitted++
	}
	// the lease held: at least a unit (300 requests in a few ms ask for
	// more than one), at most Capacity/Share (1600/16)
	if admitted < 1 || admitted > 100 {
		t.Errorf("admitted %d while Redis was down, want what the lease held: 1 to 100", admitted)
	}
	t.Logf("admitted %d from the lease while Redis was down", admitted)
}

// TestLeasedAnswersDoNotHideAFailingRedis: requests a quota lease covers
// are decided outside the breaker, so they neither count as calls nor
// break a run of failures. When Redis dies under traffic that is mostly
// leased, the breaker still opens on the calls that reach Redis (here
// one in six), instead of the leased successes keeping its failure ratio
// low and its consecutive failures apart while every other caller waits
// for its deadline.
func TestLeasedAnswersDoNotHideAFailingRedis(t *testing.T) {
	noLeaks(t)
	p := redistest.StartProcess(t)
	rs, err := redisstore.New(p.Client(clientOptions()), redisstore.Config{
		// A lease of Capacity/Share (100) from its second request, nothing
		// given back during the test.
		Leases: redisstore.LeaseConfig{Enabled: true, Hold: time.Hour, Traffic: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	s := newStore(t, rs, failover.Config{ConsecutiveFailures: 3, ProbeInterval: time.Hour, Mode: modeAll(failover.FailClosed)})
	hot := sluice.Request{Key: "hot", Limit: sluice.GCRA(sluice.PerHour(1), 1600), Cost: 1}
	for range 3 {
		if d, err := s.Take(ctx, hot); err != nil || !d.Allowed {
			t.Fatalf("before the outage: %+v, %v", d, err)
		}
	}
	calls := s.Stats().Calls
	p.Kill()
	other := sluice.Request{Key: "other", Limit: hot.Limit, Cost: 1} // no lease: every call asks Redis
	for round := 1; s.State() != failover.StateOpen; round++ {
		if round > 10 {
			t.Fatalf("breaker %v after %d failed calls among %d leased answers, want open after 3 failures", s.State(), round-1, 2*(round-1))
		}
		for range 2 {
			if d, err := s.Take(ctx, hot); err != nil || !d.Allowed || d.Degraded {
				t.Fatalf("round %d, from the lease: %+v, %v", round, d, err)
			}
		}
		if _, err := s.Take(ctx, other); err == nil {
			t.Fatalf("round %d: a key without a lease was decided while Redis is down", round)
		}
	}
	if n := s.Stats().Calls - calls; n != 3 {
		t.Errorf("%d calls reached the primary while it was down, want the 3 failures: leased answers are not calls", n)
	}
}

// TestLeasedTakeAllocs: a request its quota lease covers, decided through
// failover as sluice serve does (breaker, warm fallback), allocates
// nothing: no deadline, no state key (the lease is looked up by its
// bytes), no slice of leases. Allocations are what the gateway's
// collections are made of.
func TestLeasedTakeAllocs(t *testing.T) {
	rs, err := redisstore.New(redistest.StartProcess(t).Client(clientOptions()), redisstore.Config{
		Leases: redisstore.LeaseConfig{Enabled: true, Hold: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	local, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { local.Close() })
	s := newStore(t, rs, failover.Config{FallbackStore: local, Timeout: time.Minute})
	hot := sluice.Request{Key: "hot", Limit: sluice.TokenBucket(sluice.PerSecond(1_000_000), 1_000_000), Cost: 1}
	for range 100 { // the lease grows to cover what follows
		if d, err := s.Take(ctx, hot); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	before := rs.LeaseStats()
	allocs := testing.AllocsPerRun(1000, func() {
		if d, err := s.Take(ctx, hot); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	})
	after := rs.LeaseStats()
	t.Logf("%.1f allocations per decision; %d of %d decided from the lease", allocs, after.Local-before.Local, 1001)
	if allocs > 0.5 { // a refill now and then allocates
		t.Errorf("%.1f allocations per decision from a lease, want 0", allocs)
	}
}
