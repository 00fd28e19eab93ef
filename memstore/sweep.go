package memstore

// sweepBudget is how many entries a sweep examines per shard, resuming
// where the previous sweep stopped.
const sweepBudget = 1024

// sweep removes keys whose state is back to fresh and that have not been
// used since the previous sweep, examining at most sweepBudget slots per
// shard, resuming each time where the previous sweep stopped. Keys in use
// are kept even when fresh (a generous limit is fresh again a moment after
// each request), so they are not forgotten and re-created between
// requests.
func (s *Store) sweep() {
	now := s.readClock()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if !s.given {
			sh.floor = max(sh.floor, now)
		}
		t := sh.tab.Load()
		for steps, seen := 0, 0; steps < len(t.slots) && seen < sweepBudget; {
			j := sh.sweep & t.mask()
			if e := &t.slots[j]; e.live() && !e.pinned() {
				seen++
				if s.sweepOne(sh, t, j, now) {
					continue // slot j now holds the entry moved back into it, if any
				}
			}
			sh.sweep++
			steps++
		}
		sh.mu.Unlock()
	}
}

// sweepOne removes the entry at slot j if it is fresh at now and unused
// since the last pass, and reports whether it did; otherwise it clears its
// used flag. The shard's lock is held.
func (s *Store) sweepOne(sh *shard, t *table, j uint64, now int64) bool {
	e := &t.slots[j]
	e.mu.Lock()
	switch {
	case e.idle > now:
	case e.used():
		e.unuse()
	default:
		s.removeAt(sh, t, j)
		return true
	}
	e.mu.Unlock()
	return false
}
