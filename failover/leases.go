package failover

import (
	"context"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// The local answers of a redisstore primary: what it decides from what it
// holds in the process, without I/O, its quota leases and near cache
// (redisstore.Store.TakeLocal and TakeAllLocal). Take and TakeAll ask
// them first, with no deadline and no breaker: such an answer costs the
// primary no round trip, so it says nothing of the primary's health, and
// the breaker counts only the calls that reach Redis (a lease covering
// most requests would otherwise hide a failing Redis behind its
// successes). When there is none, the decision goes to Redis as the
// primary prepared it for its local answer (redisstore.Prepared): it is
// prepared once. While the primary cannot be reached, an outstanding
// lease is a budget Redis counted when it handed it out: spending it is
// an exact decision, not a degraded one, so the instance spends what it
// holds before its failure modes decide.

// takeLocal decides r as the primary's local answer, and reports whether
// there was one; if not, p holds r as the primary prepared it (see
// takePrimary). The warm fallback is shown it while the breaker is closed,
// as it is shown what the primary decides (see shadow).
func (s *Store) takeLocal(ctx context.Context, r sluice.Request, p *redisstore.Prepared) (sluice.Decision, bool) {
	if s.local == nil {
		return sluice.Decision{}, false
	}
	d, ok := s.local.TakeLocal(r, p)
	if ok && s.gate.Load() == gateClosed && s.shadows(r) {
		s.fallback.Take(ctx, s.fallbackRequest(r)) // see shadow
	}
	return d, ok
}

// takePrimary decides r on the primary: as a redisstore primary prepared it
// in takeLocal (p), else by its Take.
func (s *Store) takePrimary(ctx context.Context, r sluice.Request, p *redisstore.Prepared) (sluice.Decision, error) {
	if s.local != nil {
		return p.Take(ctx)
	}
	return s.primary.Take(ctx, r)
}

// takeAllLocal is takeLocal for a check.
func (s *Store) takeAllLocal(ctx context.Context, rs []sluice.Request, ds []sluice.Decision, p *redisstore.Prepared) bool {
	if s.local == nil || !s.local.TakeAllLocal(rs, ds, p) {
		return false
	}
	if s.gate.Load() == gateClosed {
		s.shadow(ctx, rs)
	}
	return true
}

// takeAllPrimary is takePrimary for a check.
func (s *Store) takeAllPrimary(ctx context.Context, rs []sluice.Request, ds []sluice.Decision, p *redisstore.Prepared) error {
	if s.local != nil {
		return p.TakeAll(ctx, ds)
	}
	return s.primary.TakeAll(ctx, rs, ds)
}
