package memstore

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// TakeAll applies rs all-or-nothing, holding the locks of every shard
// involved at once (in shard order, so concurrent calls cannot deadlock)
// and of every entry. When it refuses, nothing is charged and every
// decision has Allowed false; a request that alone would have been
// admitted has RetryAfter 0 and the Remaining it has now.
func (s *Store) TakeAll(_ context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if len(ds) != len(rs) {
		return fmt.Errorf("memstore: TakeAll: %d requests but %d decisions", len(rs), len(ds))
	}
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	for i := range rs {
		for j := range i {
			if rs[i].Key == rs[j].Key && rs[i].Limit.Shares(rs[j].Limit) {
				return fmt.Errorf("%w: key %q under %s", sluice.ErrDuplicateRequest, rs[i].Key, rs[i].Limit)
			}
		}
	}
	var hbuf [8]uint64
	var ebuf [8]*entry
	var nbuf [8]bool
	var lbuf [8]int
	hs, locked := s.lockShards(rs, hbuf[:0], lbuf[:0])
	es, created := ebuf[:0], nbuf[:0]
	admitted := false
	defer func() { s.finish(rs, hs, es, created, locked, admitted) }()
	var err error
	if es, created, err = s.entries(rs, hs, es, created); err != nil {
		return err
	}
	admitted = s.decideAll(rs, hs, es, created, ds)
	return nil
}

// lockShards appends the requests' hashes to hs and their shards to locked,
// in ascending order, and locks those shards in that order.
func (s *Store) lockShards(rs []sluice.Request, hs []uint64, locked []int) ([]uint64, []int) {
	for _, r := range rs {
		h := s.hash(r.Key)
		hs = append(hs, h)
		locked = insertSorted(locked, s.shardOf(h))
	}
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	return hs, locked
}

// entries appends to es every request's entry, found or created, pinned and
// locked, and to created whether the check created it; it checks every cost.
func (s *Store) entries(rs []sluice.Request, hs []uint64, es []*entry, created []bool) ([]*entry, []bool, error) {
	// First every entry is found or created, and pinned, with no entry's
	// lock held: creating one may move others (growth, and the backward
	// shift of an eviction), which takes their locks. Pinned entries are
	// not evicted.
	for i, r := range rs {
		sh := &s.shards[s.shardOf(hs[i])]
		e := sh.lookup(hs[i], r.Key, &r.Limit)
		isNew := e == nil
		if isNew {
			c, err := sh.compile(&r.Limit)
			if err != nil {
				return es, created, err
			}
			e = s.insert(sh, hs[i], r.Key, c)
		} else {
			e.mu.Lock()
		}
		e.setFlags(idPinned, true)
		e.mu.Unlock()
		created = append(created, isNew)
	}
	// Then each is locked where it is now.
	for i, r := range rs {
		e := s.shards[s.shardOf(hs[i])].lookup(hs[i], r.Key, &r.Limit)
		e.mu.Lock()
		es = append(es, e)
		if err := check(e, &r); err != nil {
			return es, created, err
		}
	}
	return es, created, nil
}

// check checks r against its limit, which e's state may be kept under or
// not yet (decideAll carries it over, at the time it decides at).
func check(e *entry, r *sluice.Request) error {
	c, _ := e.limit()
	if sameLimit(&c.lim, &r.Limit) {
		return c.p.Check(*r)
	}
	p, err := algo.Compile(r.Limit)
	if err != nil {
		return err
	}
	return p.Check(*r)
}

// decideAll decides every request at one time, the exact time (or the
// time the sweeper last removed fresh keys at in a shard where a key is
// new, if later: see fresh), charges them only if all are admitted, and
// reports whether they were. Every lock is held.
func (s *Store) decideAll(rs []sluice.Request, hs []uint64, es []*entry, created []bool, ds []sluice.Decision) bool {
	now := s.readClock()
	for i := range es {
		if created[i] && !s.given {
			now = max(now, s.shards[s.shardOf(hs[i])].floor)
		}
	}
	admitted := true
	for i, e := range es {
		if !created[i] {
			e.setFlags(idUsed, true)
		}
		p, _ := s.params(e, &rs[i].Limit, now) // compiled without error by check
		_, k := e.limit()
		var st algo.State
		e.load(&st, k)
		ds[i] = algo.Step(p, &st, now, rs[i].Cost, algo.MaxDelay(rs[i].MaxDelay), 0, false)
		e.store(&st, k)
		admitted = admitted && ds[i].Allowed
	}
	for i, e := range es {
		c, k := e.limit()
		p := &c.p
		var st algo.State
		e.load(&st, k)
		switch {
		case !admitted && ds[i].Allowed:
			ds[i] = algo.Step(p, &st, now, 0, algo.MaxDelay(rs[i].MaxDelay), 0, false)
			ds[i].Allowed, ds[i].RetryAfter, ds[i].Delay = false, 0, 0
		case admitted:
			ds[i] = algo.Step(p, &st, now, rs[i].Cost, algo.MaxDelay(rs[i].MaxDelay), s.lease(p, rs[i].Cost), true)
		}
		e.store(&st, k)
		s.publish(e, p, &st, now)
		s.markAhead(e, now)
	}
	return admitted
}

// finish removes the entries a check created but did not charge (a lone
// peek or refusal would keep no state either), and unlocks everything.
func (s *Store) finish(rs []sluice.Request, hs []uint64, es []*entry, created []bool, locked []int, admitted bool) {
	drop := func(i int) bool { return created[i] && !(admitted && i < len(es) && rs[i].Cost > 0) }
	// An entry to remove is first marked dead under its lock (it then
	// matches no key, and probing past it still works), and removed after
	// every entry's lock is released: its removal moves entries back,
	// which takes their locks.
	for i := range created {
		var e *entry
		if i < len(es) {
			e = es[i]
		} else {
			// Pinned but not locked: an error stopped the check first.
			e = s.shards[s.shardOf(hs[i])].lookup(hs[i], rs[i].Key, &rs[i].Limit)
			e.mu.Lock()
		}
		e.setFlags(idPinned, false)
		if drop(i) {
			e.markDead()
		}
		e.mu.Unlock()
	}
	for i := range created {
		if !drop(i) {
			continue
		}
		sh := &s.shards[s.shardOf(hs[i])]
		t := sh.tab.Load()
		w0, w1 := sh.pack(rs[i].Key, hs[i])
		if e := t.probe(hs[i], w0, w1, &rs[i].Limit, true); e != nil {
			e.mu.Lock()
			s.removeAt(sh, t, t.index(e))
		}
	}
	for _, i := range locked {
		s.shards[i].mu.Unlock()
	}
}

// insertSorted adds v to the ascending set xs.
func insertSorted(xs []int, v int) []int {
	i := 0
	for i < len(xs) && xs[i] < v {
		i++
	}
	if i < len(xs) && xs[i] == v {
		return xs
	}
	xs = append(xs, 0)
	copy(xs[i+1:], xs[i:])
	xs[i] = v
	return xs
}
