package redisstore

import (
	"math/bits"
	"sync/atomic"
)

// LeaseSizeBuckets is the length of LeaseStats.Sizes.
const LeaseSizeBuckets = 21

// LeaseStats is what a Store's quota leases have done since the Store was
// made (counters, which only grow) and what they hold at the moment of the
// call (Held, Bound, Keys). Store.LeaseStats returns it; it is the zero
// value with leases off.
//
// Every unit Redis grants ends in one of the fates counted here or is
// still held: Units = Spent + Returned + Expired + Lost + Held, but for
// what a lease call in flight or a give-back in flight is about to move.
type LeaseStats struct {
	// Calls counts the lease calls (scripts/lease.lua) that were
	// answered or failed, those made ahead of need in the background
	// included; Refused those Redis refused (it had too little left) and
	// Failed those that failed (an error: what Redis may have granted such
	// a call regardless is lost to the fleet, counted nowhere).
	Calls, Refused, Failed int64
	// Leases counts the leases Redis granted (one per request of a lease
	// call) and Units the units they held in all.
	Leases, Units int64
	// Sizes counts the leases by how many units they held: Sizes[0] those
	// of 1 unit, Sizes[i] those of more than 2^(i-1) and at most 2^i, the
	// last those of more than 2^(LeaseSizeBuckets-2).
	Sizes [LeaseSizeBuckets]int64
	// Local counts the checks (a Take, or a TakeAll of all its requests)
	// admitted from units their leases already held, with no Redis call
	// of their own: each is a script call saved.
	Local int64
	// Waits counts the checks that waited for a lease call made for other
	// requests: a lease ran dry before the call refilling it returned.
	// A share of checks that grows means the calls take longer than the
	// traffic the leases cover (see LeaseConfig.Traffic).
	Waits int64
	// Spent counts the units admitted requests took from leases; Returned
	// those given back to Redis (unspent after Hold, under a limit that
	// changed, or at Close); Expired those dropped without a give-back
	// because their fixed window had ended (the window's count is over
	// anyway) or their key was reset; Lost those whose give-back failed.
	Spent, Returned, Expired, Lost int64
	// Held is the units the leases hold now, unspent: what this instance
	// would take with it if it died now (with what lease calls in flight
	// are being granted).
	Held int64
	// Bound is the most the leases may hold at once, the documented bound
	// on what this instance can lose: Capacity/Share (at least 1) for each
	// of the Keys keys that have a lease now.
	Bound int64
	// Keys is how many keys have a lease now (at most LeaseConfig.Keys).
	Keys int
}

// leaseCounts are a leaser's counters, each a LeaseStats field.
type leaseCounts struct {
	calls, refused, failed   atomic.Int64
	leases, units            atomic.Int64
	sizes                    [LeaseSizeBuckets]atomic.Int64
	local, waits             atomic.Int64
	spent, returned, expired atomic.Int64
	lost                     atomic.Int64
}

// sizeBucket is the index in LeaseStats.Sizes of a lease of n units.
func sizeBucket(n int64) int {
	if n <= 1 {
		return 0
	}
	return min(bits.Len64(uint64(n-1)), LeaseSizeBuckets-1)
}

// answered counts a lease call that returned gs, or failed with err.
func (c *leaseCounts) answered(gs []grant, err error) {
	c.calls.Add(1)
	switch {
	case err != nil:
		c.failed.Add(1)
	case !gs[0].d.Allowed:
		c.refused.Add(1)
	default:
		for _, g := range gs {
			c.leases.Add(1)
			c.units.Add(g.granted)
			c.sizes[sizeBucket(g.granted)].Add(1)
		}
	}
}

// gaveBack counts n units given back to Redis, or lost if err.
func (c *leaseCounts) gaveBack(n int64, err error) {
	if err != nil {
		c.lost.Add(n)
		return
	}
	c.returned.Add(n)
}

// LeaseStats returns what s's quota leases have done and hold now (see
// LeaseStats), or the zero value when leases are off. It is safe for
// concurrent use; it takes every lease's lock in turn, so call it at the
// pace of a metrics scrape, not per request.
func (s *Store) LeaseStats() LeaseStats {
	l := s.leases
	if l == nil {
		return LeaseStats{}
	}
	c := &l.n
	st := LeaseStats{
		Calls: c.calls.Load(), Refused: c.refused.Load(), Failed: c.failed.Load(),
		Leases: c.leases.Load(), Units: c.units.Load(), Local: c.local.Load(), Waits: c.waits.Load(),
		Spent: c.spent.Load(), Returned: c.returned.Load(), Expired: c.expired.Load(), Lost: c.lost.Load(),
	}
	for i := range st.Sizes {
		st.Sizes[i] = c.sizes[i].Load()
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	st.Keys = len(l.byKey)
	for _, e := range l.byKey {
		e.mu.Lock()
		st.Held += e.tokens
		st.Bound += max(1, e.q.p.Cap/l.cfg.Share)
		e.mu.Unlock()
	}
	return st
}
