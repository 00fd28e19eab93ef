package failover

import (
	"context"

	"github.com/sluicehq/sluice"
)

// localTaker is a primary that decides some requests from what it holds in
// the process, without I/O: redisstore's quota leases and near cache
// (redisstore.Store.TakeLocal and TakeAllLocal). Take and TakeAll ask it
// first, with no clock reading, no deadline and no breaker: such an answer
// costs the primary no round trip, so it says nothing of the primary's
// health, and the breaker counts only the calls that reach Redis (a lease
// covering most requests would otherwise hide a failing Redis behind its
// successes). While the primary cannot be reached, an outstanding lease is
// a budget Redis counted when it handed it out: spending it is an exact
// decision, not a degraded one, so the instance spends what it holds
// before its failure modes decide.
type localTaker interface {
	TakeLocal(r sluice.Request) (sluice.Decision, bool)
	TakeAllLocal(rs []sluice.Request, ds []sluice.Decision) bool
}

// takeLocal decides r as the primary's local answer, and reports whether
// there was one. The warm fallback is shown it while the breaker is
// closed, as it is shown what the primary decides (see shadow).
func (s *Store) takeLocal(ctx context.Context, r sluice.Request) (sluice.Decision, bool) {
	if s.local == nil {
		return sluice.Decision{}, false
	}
	d, ok := s.local.TakeLocal(r)
	if ok && s.gate.Load() == gateClosed && s.shadows(r) {
		s.fallback.Take(ctx, s.fallbackRequest(r)) // see shadow
	}
	return d, ok
}

// takeAllLocal is takeLocal for a check.
func (s *Store) takeAllLocal(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) bool {
	if s.local == nil || !s.local.TakeAllLocal(rs, ds) {
		return false
	}
	if s.gate.Load() == gateClosed {
		s.shadow(ctx, rs)
	}
	return true
}
