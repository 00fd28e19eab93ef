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
