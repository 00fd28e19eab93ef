package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// SkewLocalClock moves s's local clock by d, as if its host's clock were
// wrong by that much (it is monotonic, so only a jump moves it).
func SkewLocalClock(s *Store, d time.Duration) { s.skew.Store(int64(d)) }

// InFlight is how many of s's calls are submitted and not yet answered.
func InFlight(s *Store) int64 { return s.batch.active.Load() }

// StateKeys returns the names of r's keys in Redis (its state hash and,
// for an algorithm that keeps one, its log), for a store with prefix and
// Config.Slots as slots.
func StateKeys(prefix string, slots bool, r sluice.Request) (state, log string) {
	s := &Store{prefix: prefix, slots: slots}
	state, log = s.stateKeys(&r)
	if !usesLog(r.Limit.Algorithm) {
		log = ""
	}
	return state, log
}

// SameSlot reports whether every request of rs lies in one Redis Cluster
// slot (always, on a standalone server).
func SameSlot(s *Store, rs []sluice.Request) bool {
	qs := make([]request, len(rs))
	for i, r := range rs {
		if err := s.prepare(r, &qs[i]); err != nil {
			return false
		}
	}
	return len(s.groups(qs)) == 1
}

// TakeBatch decides checks as the workers do under load: as one pipeline in
// which the checks of one slot are merged into one batch script, in order.
// Every check must lie in one slot (see SameSlot). before, if not nil, runs
// before check i is built, which is when its clock is read.
func TakeBatch(s *Store, checks [][]sluice.Request, before func(i int)) ([][]sluice.Decision, error) {
	calls := make([]*call, len(checks))
	qss := make([][]request, len(checks))
	for i, rs := range checks {
		if before != nil {
			before(i)
		}
		qss[i] = make([]request, len(rs))
		for k, r := range rs {
			if err := s.prepare(r, &qss[i][k]); err != nil {
				return nil, err
			}
		}
		if len(s.groups(qss[i])) != 1 {
			return nil, fmt.Errorf("check %d spans slots", i)
		}
		calls[i] = s.call(takeFor(qss[i]), qss[i], nil)
		s.batch.active.Add(1)
	}
	s.batch.exec(context.Background(), calls, nil)
	out := make([][]sluice.Decision, len(checks))
	for i, c := range calls {
		<-c.done
		if c.err != nil {
			return nil, c.err
		}
		out[i] = make([]sluice.Decision, len(checks[i]))
		if _, err := c.decode(out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}
