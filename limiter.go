package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/deadline"
)

// Limiter decides requests against a Store. It is safe for concurrent use and
// holds no state of its own: every instance of a service pointed at the same
// shared store enforces the same limits.
//
// The methods follow one grid: Allow is shorthand for AllowN with cost 1,
// Check applies several requests at once (all-or-nothing), and Wait blocks
// until a request is admitted or the context would expire first.
type Limiter struct {
	store Store
}

// New returns a Limiter that keeps its state in store. For a single process
// use memstore.New(); for a fleet, redisstore.
func New(store Store) *Limiter {
	return &Limiter{store: store}
}

// Allow is shorthand for AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Decision, error) {
	return l.store.Take(ctx, Request{Key: key, Limit: limit, Cost: 1})
}

// AllowN charges cost units to key under limit if the limit admits them, and
// reports the decision. A refusal is a Decision with Allowed false, not an
// error; errors are reserved for invalid limits and costs and for store
// failures. Cost 0 peeks without charging.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, cost int64) (Decision, error) {
	return l.store.Take(ctx, Request{Key: key, Limit: limit, Cost: cost})
}

// Check applies every request all-or-nothing: if any of them is refused,
// none is charged. It returns the binding decision: the refusal with the
// longest RetryAfter, or if all were admitted the decision with the fewest
// Remaining (and the longest Delay of all). Use it to limit one request on
// several dimensions at once, such as global, per route and per user.
//
// Check allocates for its results; CheckEach does not, and also returns every
// request's own decision (and lease).
func (l *Limiter) Check(ctx context.Context, reqs ...Request) (Decision, error) {
	var buf [4]Decision
	ds := buf[:0]
	if len(reqs) <= len(buf) {
		ds = buf[:len(reqs)]
	} else {
		ds = make([]Decision, len(reqs))
	}
	d, _, err := l.CheckEach(ctx, reqs, ds)
	return d, err
}

// CheckEach is Check that also writes each request's own decision into
// each, which must have the same length as reqs, and reports which request
// decided: the index of the binding decision in each. The binding decision
// it returns is each[i], except that its Delay is the longest of all when
// the check was admitted.
func (l *Limiter) CheckEach(ctx context.Context, reqs []Request, each []Decision) (d Decision, i int, err error) {
	if len(each) != len(reqs) {
		return Decision{}, 0, fmt.Errorf("sluice: CheckEach: %d requests but room for %d decisions", len(reqs), len(each))
	}
	if len(reqs) == 1 {
		d, err := l.store.Take(ctx, reqs[0])
		each[0] = d
		return d, 0, err
	}
	if err := l.store.TakeAll(ctx, reqs, each); err != nil {
		return Decision{}, 0, err
	}
	d, i = binding(each)
	return d, i, nil
}

// Wait is shorthand for WaitN(ctx, key, limit, 1).
func (l *Limiter) Wait(ctx context.Context, key string, limit Limit) (Decision, error) {
	return l.WaitN(ctx, key, limit, 1)
}

// WaitN blocks until cost units are admitted to key under limit and any
// shaping Delay has passed, then returns the admitting decision.
//
// It never charges a request it will not wait for. If ctx is already done
// it returns ctx.Err() without asking the store. With a deadline, each
// request carries MaxDelay = the time left, so the store refuses, without
// charging it, an admission whose Delay would outlast the deadline. Like
// Guava's tryAcquire(timeout), it refuses at once, without sleeping, when
// the request could not be admitted and started before the deadline: it
// then returns the refusing decision and ErrWouldExceedDeadline. Without a
// deadline it waits as long as it takes, until ctx is cancelled. Because
// other callers may take capacity while it sleeps, it asks the store again
// after each wait.
//
// Once a request is admitted it is charged, and WaitN sleeps out its Delay:
// if ctx is cancelled meanwhile it returns the decision with ctx.Err(); a
// deadline that passes during the Delay (by at most the store's round
// trip, since the store measured the Delay against the deadline when it
// decided) does not interrupt it.
func (l *Limiter) WaitN(ctx context.Context, key string, limit Limit, cost int64) (Decision, error) {
	req := Request{Key: key, Limit: limit, Cost: cost}
	for {
		if err := ctx.Err(); err != nil {
			return Decision{}, err
		}
		end, bounded := ctx.Deadline()
		if bounded {
			if req.MaxDelay = time.Until(end); req.MaxDelay <= 0 {
				<-ctx.Done() // the deadline has passed; ctx is about to say so
				return Decision{}, ctx.Err()
			}
		}
		d, err := l.store.Take(ctx, req)
		if err != nil {
			return d, err
		}
		if d.Allowed {
			if err := sleepAdmitted(ctx, d.Delay); err != nil {
				return d, err
			}
			d.Delay = 0
			return d, nil
		}
		// Refused with room left in the limit: refused for its delay alone.
		// Its start does not come sooner by asking later.
		late := bounded && d.Remaining >= max(cost, 1)
		if late || bounded && time.Until(end) < d.RetryAfter {
			return d, fmt.Errorf("%w: %s under %s needs %s", ErrWouldExceedDeadline, key, limit, d.RetryAfter)
		}
		if err := deadline.Sleep(ctx, d.RetryAfter); err != nil {
			return d, err
		}
	}
}

// Release gives back lease, the Decision.Lease of r, a request admitted
// under a concurrency limit: r names the key (its Key, Slot and Limit; its
// Cost is ignored). Call it when the work ends, typically in a defer. A
// lease of 0 (none) is ignored.
func (l *Limiter) Release(ctx context.Context, r Request, lease uint64) error {
	if lease == 0 {
		return nil
	}
	return l.store.Release(ctx, r, lease)
}

// Adjust changes the usage of r.Key under r.Limit by r.Cost, a signed delta,
// atomically: the second half of "reserve, then settle", for work whose
// cost is known only once it is done (tokens, rows, bytes). r.OnError
// applies as for a check (package failover); r.MaxDelay is ignored. Settle
// is the usual way to call it.
//
// A positive delta is charged unconditionally, even past the limit: the
// state records the overdraft (a debt), and later requests are refused
// until the refill (token_bucket, gcra, leaky_bucket, warm_up) or the
// window (fixed_window, sliding_window, sliding_log) has paid it back. A
// debt is bounded: the overdraft past an exhausted limit never exceeds
// Limit.MaxAdjust (AdjustCapacities capacities, what one adjustment may
// ask); a charge beyond that is dropped. A negative delta refunds, never
// leaving more room than the limit's Capacity: a window never below empty,
// a bucket never above full. Each algorithm's rules are in docs/adjust.md.
//
// The magnitude of the delta is at most Limit.MaxAdjust
// (ErrCostExceedsCapacity otherwise); delta 0 only reports. A concurrency
// limit cannot be adjusted (ErrNotAdjustable: give its lease back with
// Release), nor can a store that does not implement Adjuster.
//
// The Decision describes the state after the adjustment as a peek (a
// request of cost 0) does: Allowed and RetryAfter are those of a unit-cost
// request now, Remaining and ResetAfter what is left. It costs what a
// check costs: one round trip on Redis, no allocation on memstore for a
// key it holds.
func (l *Limiter) Adjust(ctx context.Context, r Request) (Decision, error) {
	a, ok := l.store.(Adjuster)
	if !ok {
		return Decision{}, fmt.Errorf("%w: the store %T does not implement sluice.Adjuster", ErrNotAdjustable, l.store)
	}
	return a.Adjust(ctx, r)
}

// Settle charges the difference between the actual cost of a request and
// what it reserved when it was checked: Adjust with delta actual -
// reserved. Reserve 0 (a peek) and settle the whole cost afterwards, or
// reserve an estimate and settle the difference, either way; an
// underestimate is charged into debt, an overestimate refunded. Both costs
// must be zero or more (ErrNegativeCost). For a key with a Slot
// (Request.Slot), call Adjust with the difference.
func (l *Limiter) Settle(ctx context.Context, key string, limit Limit, reserved, actual int64) (Decision, error) {
	for _, c := range [...]struct {
		name string
		v    int64
	}{{"reserved", reserved}, {"actual", actual}} {
		if c.v < 0 {
			return Decision{}, &LimitError{Algorithm: limit.Algorithm, Field: "cost",
				Reason: fmt.Sprintf("%s %d is below zero under %s for key %q", c.name, c.v, limit, key), Err: ErrNegativeCost}
		}
	}
	return l.Adjust(ctx, Request{Key: key, Limit: limit, Cost: actual - reserved})
}

// sleepAdmitted sleeps the Delay of an admitted request: until it ends or
// ctx is cancelled, but not interrupted by ctx's deadline (see WaitN).
func sleepAdmitted(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	done := ctx.Done()
	for {
		select {
		case <-t.C:
			return nil
		case <-done:
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return ctx.Err()
			}
			done = nil
		}
	}
}
