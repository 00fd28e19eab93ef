package redisstore_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// countCalls counts the commands a client sends to Redis, pipelined or not.
type countCalls struct{ n atomic.Int64 }

func (c *countCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *countCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *countCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestLeaseSmoke: one instance with leases admits a limit that cannot
// refill during the test, all of it but what it still holds or gave back,
// and makes few calls doing it.
func TestLeaseSmoke(t *testing.T) {
	c := redistest.Standalone(t)
	calls := &countCalls{}
	c.AddHook(calls)
	s := newStore(t, c, redisstore.Config{Leases: redisstore.LeaseConfig{Enabled: true}})
	lim := sluice.GCRA(sluice.PerHour(1), 1600)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 200 {
				d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: lim, Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	redisstore.SettleLeases(s)
	held := redisstore.HeldFor(s, "k", lim)
	peek, err := s.Take(ctx, sluice.Request{Key: "k", Limit: lim})
	if err != nil {
		t.Fatal(err)
	}
	// units prefetched after the last request, or given back, are not
	// admitted, and not lost
	if admitted.Load()+held+peek.Remaining != 1600 || admitted.Load() < 1600-100 {
		t.Errorf("admitted %d, held %d, Redis has %d: want 1600 in all, at most a lease (100) not admitted",
			admitted.Load(), held, peek.Remaining)
	}
	t.Logf("%d calls for %d admitted", calls.n.Load(), admitted.Load())
	checkLeaseStats(t, s.LeaseStats(), admitted.Load(), held)
	s.Close()
	if st := s.LeaseStats(); st.Held != 0 || st.Returned < held {
		t.Errorf("after Close: %+v, want nothing held and the %d held returned", st, held)
	}
}

// checkLeaseStats checks what LeaseStats says of one key's leases, once
// settled, against what the test saw: admitted requests of cost 1, held
// units, and every unit granted accounted for.
func checkLeaseStats(t *testing.T, st redisstore.LeaseStats, admitted, held int64) {
	t.Helper()
	t.Logf("%+v", st)
	var sizes int64
	for _, n := range st.Sizes {
		sizes += n
	}
	switch {
	case st.Spent != admitted:
		t.Errorf("Spent %d, want the %d admitted", st.Spent, admitted)
	case st.Held != held || st.Held > st.Bound:
		t.Errorf("Held %d, Bound %d: want %d held, within the bound", st.Held, st.Bound, held)
	case st.Units != st.Spent+st.Returned+st.Expired+st.Lost+st.Held:
		t.Errorf("%d units granted, %d spent + %d returned + %d expired + %d lost + %d held: want every unit accounted for",
			st.Units, st.Spent, st.Returned, st.Expired, st.Lost, st.Held)
	case sizes != st.Leases || st.Calls < st.Leases+st.Refused+st.Failed:
		t.Errorf("%d leases by size, %d leases, %d calls (%d refused, %d failed): want every lease sized, a call each",
			sizes, st.Leases, st.Calls, st.Refused, st.Failed)
	case st.Local > admitted || st.Local+st.Calls < admitted:
		t.Errorf("%d requests admitted without a call, %d calls: want every admitted request from one or the other", st.Local, st.Calls)
	}
}

// floodCase is a limit for the flood test and the bounds of what a flood
// between two Redis times (µs) admits: at most hi, and at least lo of
// what the limit held where the flood saturated it (refused tells where:
// see refusals).
type floodCase struct {
	lim    sluice.Limit
	bounds func(t0, t1 int64, refused *refusals) (lo, hi int64)
}

var floodCases = []floodCase{
	{sluice.TokenBucket(sluice.PerSecond(5000), 5000), bucketBounds(5000, 5000)},
	{sluice.GCRA(sluice.PerSecond(5000), 5000), bucketBounds(5000, 5000)},
	{sluice.FixedWindow(2500, 500*time.Millisecond), func(t0, t1 int64, refused *refusals) (lo, hi int64) {
		// at most every window the flood touched; at least every window
		// it covered whole and exhausted (a refusal in it)
		const p = 500_000
		for w := (t0 + p - 1) / p; w < t1/p; w++ {
			if refused.within(w*p, (w+1)*p) {
				lo += 2500
			}
		}
		return lo, 2500 * (t1/p - t0/p + 1)
	}},
}

// bucketBounds is what a bucket of rate per second and burst, full at t0,
// admits until t1: at most all of it, at least all but the refill of the
// stretches in which the flood was refused nothing (a machine that kept
// the flood's goroutines from running may have let the bucket overflow
// then; reckoned as if it had, without the burst's slack).
func bucketBounds(rate, burst int64) func(t0, t1 int64, refused *refusals) (int64, int64) {
	return func(t0, t1 int64, refused *refusals) (int64, int64) {
		b := burst + (t1-t0)*rate/1_000_000
		return b - refused.idle(t0, t1)*rate/1_000_000, b
	}
}

// refusals marks the 10 ms slices of the flood (on Redis's clock, which is
// this machine's) in which a request was refused: the limit was exhausted
// in that slice. A refusal is marked only when the call began and ended in
// one slice, so that its mark is certain.
type refusals struct {
	t0 int64 // µs, the start of slice 0
	s  [4096]atomic.Bool
}

const refusalSlice = 10_000 // µs

func (r *refusals) mark(before, after time.Time) {
	i, j := (before.UnixMicro()-r.t0)/refusalSlice, (after.UnixMicro()-r.t0)/refusalSlice
	if i == j && i >= 0 && i < int64(len(r.s)) {
		r.s[i].Store(true)
	}
}

// slices returns the slices wholly within [from, to).
func (r *refusals) slices(from, to int64) (lo, hi int64) {
	lo = max(0, (from-r.t0+refusalSlice-1)/refusalSlice)
	hi = min(int64(len(r.s)), (to-r.t0)/refusalSlice)
	return lo, hi
}

// within reports whether a refusal was marked in a slice within [from, to).
func (r *refusals) within(from, to int64) bool {
	lo, hi := r.slices(from, to)
	for i := lo; i < hi; i++ {
		if r.s[i].Load() {
			return true
		}
	}
	return false
}

// idle returns how long (µs) of [from, to) is not covered by marked slices.
func (r *refusals) idle(from, to int64) int64 {
	lo, hi := r.slices(from, to)
	n := (to - from) - (hi-lo)*refusalSlice // the partial slices at the ends
	for i := lo; i < hi; i++ {
		if !r.s[i].Load() {
			n += refusalSlice
		}
	}
	return max(0, n)
}

func redisTime(t *testing.T, c redis.UniversalClient) int64 {
	t.Helper()
	tm, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMicro()
}

// floodResult is what a flood admitted, what it cost and what a killed
// instance took with it.
type floodResult struct {
	admitted, lo, hi, calls, lost, held, unclaimed int64
	idle                                           time.Duration // of the flood, with no refusal (not saturated)
}

// floodShare caps the flood's leases at 1/32 of the capacity: a bucket
// that holds a second of its rate (so that a stall of the loaded test
// machine shorter than that loses nothing) with leases of 156 units.
const floodShare = 32

// flood runs 3 instances with leases × 64 goroutines against one key
// under fc.lim for d; if kill, the first instance dies halfway, at the
// first moment after it when it holds units of the key (Killer).
func flood(t *testing.T, deploy string, fc floodCase, d time.Duration, kill bool) floodResult {
	prefix := redistest.Prefix(t)
	var stores []*redisstore.Store
	var clients []redis.UniversalClient
	calls := &countCalls{}
	for range 3 {
		var c redis.UniversalClient = redistest.Standalone(t)
		if deploy == "cluster" {
			c = redistest.Cluster(t)
		}
		c.AddHook(calls)
		clients = append(clients, c)
		s, err := redisstore.New(c, redisstore.Config{Prefix: prefix, Leases: redisstore.LeaseConfig{Enabled: true, Share: floodShare}})
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	var killer *redisstore.Killer
	if kill {
		killer = redisstore.ArmKill(stores[0], "hot", fc.lim)
	}
	for _, s := range stores { // load the scripts first (on every master)
		if _, err := s.Take(ctx, sluice.Request{Key: "warm", Limit: fc.lim, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	var res floodResult
	var admitted atomic.Int64
	var stop [3]atomic.Bool
	t0 := redisTime(t, clients[0])
	start := time.Now()
	refused := &refusals{t0: t0}
	var first sync.Once
	flowing := make(chan struct{}) // closed at the first admission
	var wg sync.WaitGroup
	for i, s := range stores {
		for range 64 {
			wg.Go(func() {
				for !stop[i].Load() {
					before := time.Now()
					dec, err := s.Take(ctx, sluice.Request{Key: "hot", Limit: fc.lim, Cost: 1})
					if err != nil {
						if !stop[i].Load() {
							t.Error(err)
						}
						return
					}
					if dec.Allowed {
						admitted.Add(1)
						first.Do(func() { close(flowing) })
					} else {
						refused.mark(before, time.Now())
					}
				}
			})
		}
	}
	<-flowing
	// the flood draws from the limit from here on; what it held from t0
	// to here (full at t0) was admitted or is still there
	tFlow := redisTime(t, clients[0])
	time.Sleep(d / 2) // the flood's length, not a wait for something to happen
	if kill {
		res.lost = killer.Kill(start.Add(d))
		stop[0].Store(true)
	}
	time.Sleep(time.Until(start.Add(d)))
	tStop := redisTime(t, clients[0])
	peek, err := stores[2].Take(ctx, sluice.Request{Key: "hot", Limit: fc.lim})
	if err != nil {
		t.Fatal(err)
	}
	res.unclaimed = peek.Remaining
	for i := range stop {
		stop[i].Store(true)
	}
	if kill {
		killer.Release() // its requests end, with errors
	}
	wg.Wait()
	t1 := redisTime(t, clients[0])
	for i, s := range stores {
		if !kill || i > 0 {
			redisstore.SettleLeases(s) // prefetches in flight
			res.held += redisstore.Held(s)
			s.Close()
		}
	}
	// at least what the limit held from when the flood drew from it
	// until it was told to stop (a loaded machine may start 192
	// goroutines late), at most what it held from before the flood
	// until every instance had stopped
	res.lo, _ = fc.bounds(tFlow, tStop, refused)
	_, res.hi = fc.bounds(t0, t1, refused)
	res.idle = time.Duration(refused.idle(tFlow, tStop)) * time.Microsecond
	res.admitted, res.calls = admitted.Load(), calls.n.Load()
	return res
}

// TestLeaseFlood: 3 instances × 64 goroutines flood one hot key under a
// limit they saturate, with leases: the fleet never admits more than the
// limit's bound, admits at least 99% of it (counting what the instances
// still hold when it stops, which they give back), and calls Redis at most
// once per 20 admissions. With an instance killed halfway while it holds
// units, what it held is the only loss: more than nothing, at most
// Capacity/Share.
func TestLeaseFlood(t *testing.T) {
	const d = 3 * time.Second
	for _, deploy := range []string{"standalone", "cluster"} {
		for _, kill := range []bool{false, true} {
			for _, fc := range floodCases {
				name := deploy + "/" + fc.lim.Algorithm.String()
				if kill {
					name += "/kill"
				}
				t.Run(name, func(t *testing.T) {
					r := flood(t, deploy, fc, d, kill)
					perAdmitted := float64(r.calls) / float64(r.admitted)
					t.Logf("admitted %d of bound %d..%d (%.2f%% of the least), %d calls (%.4f per admitted), lost %d, held at the end %d, unclaimed %d, not saturated for %v",
						r.admitted, r.lo, r.hi, 100*float64(r.admitted)/float64(r.lo), r.calls, perAdmitted, r.lost, r.held, r.unclaimed, r.idle)
					if r.admitted > r.hi {
						t.Errorf("admitted %d, above the bound %d", r.admitted, r.hi)
					}
					if maxLost := fc.lim.Capacity()/floodShare + 1; r.lost > maxLost || kill && r.lost == 0 {
						t.Errorf("the killed instance held %d, want more than 0 and at most Capacity/Share = %d", r.lost, maxLost)
					}
					// What the instances still held when the flood stopped goes
					// back to Redis at Close, and what Redis had not handed out
					// when it was told to stop (at most a lease an instance
					// waits to fill) is there for the next request: neither was
					// admitted, neither is lost.
					if min := (r.lo - r.lost) * 99 / 100; r.admitted+r.held+r.unclaimed < min {
						t.Errorf("admitted %d (and %d held at the end, %d unclaimed), below 99%% of the bound less what the killed instance held (%d)",
							r.admitted, r.held, r.unclaimed, min)
					}
					if perAdmitted > 0.05 {
						t.Errorf("%.4f Redis calls per admitted request, want at most 0.05", perAdmitted)
					}
				})
			}
		}
	}
}

// TestLeaseCheckAllOrNothing: composite checks (a global limit and a
// per-user one) decided with leases by 3 instances × 16 goroutines never
// charge a request one limit refused: every limit admits exactly its
// bound, no more, the global one counting only checks every limit admitted.
// On the cluster the keys share a slot through their Slot, with
// Config.Slots (without it they would be decided without leases).
func TestLeaseCheckAllOrNothing(t *testing.T) {
	for _, deploy := range []string{"standalone", "cluster"} {
		t.Run(deploy, func(t *testing.T) {
			prefix := redistest.Prefix(t)
			global := sluice.GCRA(sluice.PerHour(1), 300)
			perUser := sluice.FixedWindow(40, time.Hour)
			var stores []*redisstore.Store
			for range 3 {
				var c redisstore.Client = redistest.Standalone(t)
				if deploy == "cluster" {
					c = redistest.Cluster(t)
				}
				stores = append(stores, newStore(t, c, redisstore.Config{Prefix: prefix,
					Slots: true, Leases: redisstore.LeaseConfig{Enabled: true}}))
			}
			var perUserAdmitted [10]atomic.Int64
			var wg sync.WaitGroup
			for _, s := range stores {
				for g := range 16 {
					wg.Go(func() {
						ds := make([]sluice.Decision, 2)
						for k := range 60 {
							u := (g + k) % 10
							rs := []sluice.Request{{Key: "all", Slot: "rule", Limit: global, Cost: 1}, {Key: "user" + strconv.Itoa(u), Slot: "rule", Limit: perUser, Cost: 1}}
							if err := s.TakeAll(ctx, rs, ds); err != nil {
								t.Error(err)
								return
							}
							if ds[0].Allowed != ds[1].Allowed {
								t.Errorf("one check, decisions %+v and %+v", ds[0], ds[1])
							}
							if ds[0].Allowed {
								perUserAdmitted[u].Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			var total int64
			for u := range perUserAdmitted {
				n := perUserAdmitted[u].Load()
				if n > 40 {
					t.Errorf("user %d: %d admitted, above its limit 40", u, n)
				}
				total += n
			}
			// 2880 checks, 288 per user: every user could reach 40 but the
			// global limit (300) runs out first; what the instances still
			// hold of it is not admitted, and not lost
			var held int64
			for _, s := range stores {
				redisstore.SettleLeases(s) // prefetches in flight
				held += redisstore.HeldIn(s, sluice.Request{Key: "all", Slot: "rule", Limit: global})
			}
			// and what they gave back after Hold is in Redis again
			peek, err := stores[0].Take(ctx, sluice.Request{Key: "all", Slot: "rule", Limit: global})
			if err != nil {
				t.Fatal(err)
			}
			if total+held+peek.Remaining != 300 {
				t.Errorf("%d checks admitted, %d units held, %d in Redis, want exactly the global limit's 300 in all", total, held, peek.Remaining)
			}
		})
	}
}

// TestLeaseGivenBack: what a lease holds when its store closes goes back to
// Redis: afterwards Redis has exactly what was not admitted.
func TestLeaseGivenBack(t *testing.T) {
	for _, lim := range []sluice.Limit{
		sluice.TokenBucket(sluice.PerHour(1), 1000), sluice.GCRA(sluice.PerHour(1), 1000), sluice.FixedWindow(1000, time.Hour),
	} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			prefix := redistest.Prefix(t)
			s, err := redisstore.New(redistest.Standalone(t), redisstore.Config{Prefix: prefix, Leases: redisstore.LeaseConfig{Enabled: true}})
			if err != nil {
				t.Fatal(err)
			}
			for range 100 {
				if d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: lim, Cost: 1}); err != nil || !d.Allowed {
					t.Fatalf("%+v, %v", d, err)
				}
			}
			redisstore.SettleLeases(s)
			held := redisstore.HeldFor(s, "k", lim)
			s.Close()
			other := newStore(t, redistest.Standalone(t), redisstore.Config{Prefix: prefix})
			d, err := other.Take(ctx, sluice.Request{Key: "k", Limit: lim})
			if err != nil {
				t.Fatal(err)
			}
			if d.Remaining != 900 {
				t.Errorf("Redis has %d after 100 admitted and %d held given back, want 900", d.Remaining, held)
			}
		})
	}
}

// TestLeaseCallerLeaves: callers whose deadlines end while their lease
// call is in flight lose no capacity: what Redis granted goes to the lease,
// so that afterwards what was admitted, what is held and what Redis has
// add up to the limit exactly.
func TestLeaseCallerLeaves(t *testing.T) {
	s := newStore(t, redistest.Standalone(t), redisstore.Config{Leases: redisstore.LeaseConfig{Enabled: true}})
	lim := sluice.GCRA(sluice.PerHour(1), 100_000)
	var admitted int64
	for i := range 300 {
		// a key of its own (a lease call each) and a deadline around a
		// round trip: some end before the call is sent, some while it is
		// in flight, some after its answer
		c, cancel := context.WithTimeout(ctx, time.Duration(i%30)*40*time.Microsecond)
		d, err := s.Take(c, sluice.Request{Key: "k" + strconv.Itoa(i), Limit: lim, Cost: 1})
		cancel()
		if err == nil && d.Allowed {
			admitted++
		}
	}
	redisstore.SettleLeases(s)
	var total int64
	for k := range 300 {
		key := "k" + strconv.Itoa(k)
		peek, err := s.Take(ctx, sluice.Request{Key: key, Limit: lim})
		if err != nil {
			t.Fatal(err)
		}
		total += 100_000 - peek.Remaining - redisstore.HeldFor(s, key, lim)
	}
	if total != admitted {
		t.Errorf("Redis handed out %d units that are not held, %d were admitted: %d lost", total, admitted, total-admitted)
	}
}

// TestLeaseRampAfterPause: a key that turns hot (at first, or after a
// pause that gave its lease back and emptied its demand windows) reaches
// the lease its rate needs in its second call, where a lease of what had
// been seen grew by about a request per call, each a round trip its
// requests waited for: 1,000 requests a second make at most 3 lease calls
// in their first 20 ms (a unit, then 32, then one ahead of need), where
// they made 6.
func TestLeaseRampAfterPause(t *testing.T) {
	clock := &fakeClock{}
	clock.us.Store(1_800_000_000_000_000)
	s := newStore(t, redistest.Standalone(t), redisstore.Config{Prefix: redistest.Prefix(t), Now: clock.now,
		Leases: redisstore.LeaseConfig{Enabled: true}})
	hot := sluice.Request{Key: "hot", Limit: sluice.TokenBucket(sluice.PerSecond(1_000_000), 1_000_000), Cost: 1}
	for range 2 {
		for range 20 {
			if d, err := s.Take(ctx, hot); err != nil || !d.Allowed {
				t.Fatalf("%+v, %v", d, err)
			}
			clock.us.Add(time.Millisecond.Microseconds())
		}
		clock.us.Add(time.Second.Microseconds()) // a pause: the next decision gives the lease back
	}
	s.Close() // waits for the calls made ahead of need
	if st := s.LeaseStats(); st.Calls > 6 {
		t.Errorf("%d lease calls for two bursts of 20 requests 1 ms apart, want at most 3 each", st.Calls)
	}
}
