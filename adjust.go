package sluice

import "time"

// AdjustCapacities is how many of a limit's capacities one adjustment may
// charge or refund (Limit.MaxAdjust), and how far past an exhausted limit a
// key's debt may go: a settle larger than that is an error, a debt deeper
// than that is not recorded.
const AdjustCapacities = 4

// MaxAdjust is the largest magnitude of one adjustment under l
// (Limiter.Adjust, Limiter.Settle): AdjustCapacities × Capacity, and for
// warm_up at most what keeps its arithmetic exact (2^53 µs of pacing).
// It is also the deepest a key's debt may go past an exhausted limit. l
// must be valid.
func (l Limit) MaxAdjust() int64 {
	m := AdjustCapacities * l.Capacity()
	if s := l.Algorithm.spec(); s != nil && s.pacedAdjust {
		if us := int64(l.Period / time.Microsecond); us > 0 {
			m = min(m, maxExact/us)
		}
	}
	return m
}
