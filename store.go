package sluice

import (
	"context"
	"time"
)

// Request is one thing to limit: a key under a limit, charged Cost units.
//
// Cost 0 is a peek: nothing is charged, Allowed reports whether a unit-cost
// request would be admitted now, and Remaining is what is left. A cost above
// the limit's Capacity is an error (ErrCostExceedsCapacity), never a silent
// refusal that would last forever.
type Request struct {
	Key   string
	Limit Limit
	Cost  int64

	// MaxDelay is the longest shaping Delay the caller will wait; zero
	// means no bound, a negative value is an error (ErrNegativeMaxDelay).
	// A request whose Delay would exceed it is refused and not charged,
	// in the same atomic step that decides it, so a caller that will not
	// wait never holds a place in the queue. Its RetryAfter is then the
	// time until the same request, with the same MaxDelay, would be
	// admitted with a Delay of at most MaxDelay if nothing else happened
	// meanwhile: the later of the time until the queue ahead has drained
	// to MaxDelay (Delay - MaxDelay) and the time until the limit admits
	// it at all. Remaining still counts the room the limit has, so a
	// refusal with Remaining ≥ Cost was refused for its delay alone, and
	// asking again later does not help: the place it would start at does
	// not come sooner. Delays are whole microseconds, so MaxDelay counts in
	// whole microseconds, rounded down. Only leaky_bucket returns a Delay;
	// other limits ignore MaxDelay. A peek (Cost 0) reports whether a
	// unit-cost request would be admitted within MaxDelay.
	MaxDelay time.Duration
}

// Store keeps the state of every (key, limit) and runs the algorithms on it.
// sluice ships two: memstore (in-process, the default) and redisstore
// (shared by many instances). Both give the same decisions for the same
// sequence of requests and times.
//
// Implementations are safe for concurrent use. They validate each limit and
// cost and report problems with the errors of this package.
type Store interface {
	// Take applies one request and returns its decision.
	Take(ctx context.Context, r Request) (Decision, error)

	// TakeAll applies several requests all-or-nothing: if any is refused,
	// none is charged. It writes one decision per request into ds, which
	// has the same length as rs.
	TakeAll(ctx context.Context, rs []Request, ds []Decision) error

	// Release gives back the lease of a request admitted under a
	// concurrency limit. Releasing an unknown or expired lease is not an
	// error: the slot is free either way.
	Release(ctx context.Context, key string, limit Limit, lease uint64) error
}
