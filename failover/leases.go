package failover

import "github.com/sluicehq/sluice"

// heldLeases is what a primary with quota leases offers (redisstore with
// Config.Leases): deciding requests from the units the instance already
// holds, without a call.
type heldLeases interface {
	TakeHeld(rs []sluice.Request, ds []sluice.Decision) bool
}

// fromLeases decides rs, all or nothing, from the quota leases the primary
// already holds, and reports whether it could. While the primary cannot be
// reached, an outstanding lease is a budget Redis counted when it handed
// it out: spending it is an exact decision, not a degraded one, so the
// instance spends what it holds before its failure modes decide.
func (s *Store) fromLeases(rs []sluice.Request, ds []sluice.Decision) bool {
	h, ok := s.primary.(heldLeases)
	return ok && h.TakeHeld(rs, ds)
}

// localTaker is a primary that decides some requests from what it holds in
// the process, without I/O: redisstore's quota leases and near cache
// (redisstore.Store.TakeLocal). Take asks it first, with no clock reading,
// no deadline and no breaker: such an answer costs the primary no round
// trip, so it says nothing of the primary's health, and the breaker counts
// only the calls that reach Redis (a lease covering most requests would
// otherwise hide a failing Redis behind its successes). While the breaker
// is open this is the same spend of an outstanding lease as fromLeases.
type localTaker interface {
	TakeLocal(r sluice.Request) (sluice.Decision, bool)
}
