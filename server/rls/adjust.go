package rls

import (
	"context"
	"math"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/algo"
)

// Charges outside the all-or-nothing check: the hits of a refused
// descriptor, which the client can no longer take back, and the hits a
// descriptor gives back (is_negative_hits). Both go through
// decide.Decider.Adjust, which bounds them: a charge into a debt of at
// most sluice.AdjustCapacities capacities past the limit, a refund never
// below an empty counter.

// adjuster makes those charges for a Service, in either counting.
type adjuster struct {
	dc   *decide.Decider
	logs *aggregator
}

// refunds gives back the hits of every is_negative_hits descriptor of r,
// in request order and before the checks, so that a request that returns
// hits and charges others on the same counter finds the room it gave.
func (a *adjuster) refunds(ctx context.Context, r *request) error {
	for i := range r.items {
		if it := &r.items[i]; it.refund && it.result == 0 {
			if err := a.refund(ctx, r.req.Domain, it, it.rule.limit); err != nil {
				return err
			}
		}
	}
	return nil
}

// refund gives an item's hits back to its counter under lim. A limit that
// refuses everything (requests_per_unit: 0) has nothing to give back.
func (a *adjuster) refund(ctx context.Context, domain string, it *item, lim sluice.Limit) error {
	it.result = ResultRefunded
	if it.rule.rpu == 0 {
		return nil
	}
	d, err := a.dc.Adjust(ctx, &decide.Check{Name: it.rule.path, Key: it.key, Limit: lim}, -signed(it.cost))
	if err != nil {
		return storeError(ctx, a.logs, domain, err)
	}
	it.d = d
	return nil
}

// debit charges, under CountAllOrNothing, the hits of each enforced
// counter that refused the request (a descriptor OVER_LIMIT): refused hits
// count, as envoyproxy/ratelimit counts them, so that hits reported when
// the work is already done (Envoy's hits_addend at the end of a stream,
// whose answer it ignores) fill the budget instead of vanishing. The
// request's other limits stay uncharged: all or nothing for what could
// still be refused. A quota_mode limit, checked on its own, pays likewise
// when it is over; a shadow_mode one never does. Hits of 0 (a look) charge
// nothing. A store error leaves the request refused and is logged by the
// Decider.
func (a *adjuster) debit(ctx context.Context, r *request) {
	for i := range r.items {
		if it := &r.items[i]; it.result == ResultOverLimit && it.check >= 0 && it.cost > 0 && r.apart(it.rule) && owes(&r.shadow[it.check], it.d) {
			_, _ = a.dc.Adjust(ctx, &r.shadow[it.check], signed(it.cost))
		}
	}
	for j := range r.enforced {
		var cost uint64
		refused := false
		for i := range r.items {
			if it := &r.items[i]; it.check == j && !r.apart(it.rule) {
				cost = satAdd(cost, it.cost)
				refused = refused || it.result == ResultOverLimit
			}
		}
		if refused && cost > 0 && j < len(r.res.Each) && owes(&r.enforced[j], r.res.Each[j]) {
			_, _ = a.dc.Adjust(ctx, &r.enforced[j], signed(cost)) // an error is logged; the request is refused either way
		}
	}
}

// owes reports whether a refused check, decided d, is worth charging: not
// a fixed window with nothing left, which refuses every request, looks
// included, until it ends whatever more it holds. So a key hammered once
// it is spent costs no store round trip (redisstore's near cache answers
// its refusals), as envoyproxy/ratelimit's local cache of over-limit keys
// spares its Redis.
func owes(c *decide.Check, d sluice.Decision) bool {
	return !algo.Aligned(c.Limit.Algorithm) || d.Remaining > 0
}

// signed is a count of hits as a cost, saturated (Adjust bounds it further).
func signed(n uint64) int64 { return int64(min(n, math.MaxInt64)) }
