package failover

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
)

var _ sluice.Adjuster = (*Store)(nil)

// Adjust changes a key's usage (sluice.Limiter.Adjust) on the primary,
// through the deadline and the breaker as a check goes, and shows the
// fallback store the same adjustment for a Fallback request (see
// Fallback). When the primary cannot adjust, r's Mode decides:
//
//	Fallback    the fallback store adjusts its count (the delta capped at
//	            the scaled limit's MaxAdjust); a charge is owed to the
//	            primary like a fallback admission, a refund lowers what is
//	            owed for the key
//	FailOpen    nothing is counted; the decision is that of a key with no
//	            history, Degraded
//	FailClosed  an error wrapping ErrUnavailable
//
// A primary that is not a sluice.Adjuster makes every adjustment fail
// with sluice.ErrNotAdjustable.
func (s *Store) Adjust(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	pa, ok := s.primary.(sluice.Adjuster)
	if !ok {
		return sluice.Decision{}, fmt.Errorf("%w: the primary store %T does not implement sluice.Adjuster", sluice.ErrNotAdjustable, s.primary)
	}
	start, probe, ok := s.admit()
	if !ok {
		return s.degradedAdjust(ctx, r, nil)
	}
	cctx, stop := s.deadline(ctx, start)
	d, err := pa.Adjust(cctx, r)
	stop.Stop()
	switch err = s.finish(ctx, cctx, err, start, probe); {
	case err == nil:
		if fa, ok := s.fallback.(sluice.Adjuster); ok && s.shadows(r) {
			fa.Adjust(ctx, s.fallbackAdjustment(r)) // see shadow; its answer is not the decision
		}
		return d, nil
	case !isFailure(err):
		return d, err
	}
	return s.degradedAdjust(ctx, r, err)
}

// degradedAdjust adjusts r by its Mode; cause is the primary's error, or
// nil if the breaker kept the call from the primary.
func (s *Store) degradedAdjust(ctx context.Context, r sluice.Request, cause error) (sluice.Decision, error) {
	m, err := s.degradedMode(r, cause)
	if err != nil {
		return sluice.Decision{}, err
	}
	if m == Fallback {
		fa, ok := s.fallback.(sluice.Adjuster)
		if !ok {
			return sluice.Decision{}, fmt.Errorf("failover: fallback store %T: %w", s.fallback, sluice.ErrNotAdjustable)
		}
		d, err := fa.Adjust(ctx, s.fallbackAdjustment(r))
		if err != nil {
			return sluice.Decision{}, fmt.Errorf("failover: fallback store: %w", err)
		}
		s.debts.add(r)
		return marked(d), nil
	}
	r.Cost = 0
	return admitted(r), nil
}

// fallbackAdjustment is r under its scaled limit, its delta capped at the
// scaled limit's MaxAdjust either way.
func (s *Store) fallbackAdjustment(r sluice.Request) sluice.Request {
	r.Limit = s.scale.Load().limit(r.Limit)
	c := r.Limit.MaxAdjust()
	r.Cost = max(-c, min(r.Cost, c))
	return r
}
