package sluice

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Request is one thing to limit: a key under a limit, charged Cost units.
//
// Cost 0 is a peek: nothing is charged, Allowed reports whether a unit-cost
// request would be admitted now, and Remaining is what is left. A cost above
// the limit's Capacity is an error (ErrCostExceedsCapacity), never a silent
// refusal that would last forever.
//
// Given to Limiter.Adjust (an Adjuster), Cost is a signed delta instead: a
// positive one is charged even past the limit, into a bounded debt, and a
// negative one refunded, never beyond an unused limit; its magnitude is at
// most Limit.MaxAdjust.
type Request struct {
	Key   string
	Limit Limit
	Cost  int64

	// OnError says what a store that can fail (package failover, in
	// front of Redis) does with this request when it cannot decide it.
	// The zero value, FailDefault, leaves it to that store's default.
	// Stores that cannot fail ignore it.
	OnError FailureMode

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

	// Slot, if not empty, is the part of Key that chooses where a store
	// spread over shards keeps its state: on a Redis Cluster, redisstore
	// (with Config.Slots) keeps every key of one Slot on one hash slot, so
	// that a check of them is one atomic script (and can use quota
	// leases) rather than a charge per slot and a refund; it also makes
	// that slot as hot as the keys that share it. Empty, the default,
	// means the whole Key: keys spread over the cluster. A policy rule
	// with one_slot gives its checks the rule's part of their keys
	// (decide.Check.Slot). In such a store the Slot is part of the key's
	// identity: name a key with the same Slot every time (in Take,
	// TakeAll, Adjust, Release and Reset), or it names another state.
	// Limiter's methods that take a key and a limit (Allow, AllowN, Wait,
	// Settle) send none: give a Slot through Check, CheckEach, Adjust and
	// Release. Stores that are not spread ignore it.
	Slot string
}

// FailureMode says what happens to a request when the store meant to decide
// it cannot: admit it uncounted, refuse it, or decide it with a local
// fallback limiter. It travels with each Request, so that a store wrapper
// (package failover) applies the mode of the rule that planned the request.
type FailureMode uint8

const (
	// FailDefault leaves the choice to the store's configured default.
	FailDefault FailureMode = iota
	// FailOpen admits the request without counting it: availability over
	// the limit.
	FailOpen
	// FailClosed refuses the request: the limit over availability.
	FailClosed
	// FailFallback decides the request with a local limiter whose limits
	// are a share of the shared ones.
	FailFallback
)

var failureModeNames = [...]string{FailDefault: "default", FailOpen: "open", FailClosed: "closed", FailFallback: "fallback"}

// String returns "default", "open", "closed" or "fallback", the names
// configuration files use.
func (m FailureMode) String() string {
	if int(m) < len(failureModeNames) {
		return failureModeNames[m]
	}
	return "FailureMode(" + strconv.Itoa(int(m)) + ")"
}

// ParseFailureMode returns the FailureMode named "open", "closed" or
// "fallback" ("default" too, for FailDefault).
func ParseFailureMode(s string) (FailureMode, error) {
	for m, name := range failureModeNames {
		if s == name {
			return FailureMode(m), nil
		}
	}
	return 0, fmt.Errorf("sluice: unknown failure mode %q (want open, closed or fallback)", s)
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

	// Release gives back lease, the Decision.Lease of r, a request
	// admitted under a concurrency limit: r names the key (its Key, Slot
	// and Limit); its Cost and the rest are ignored. Releasing an unknown
	// or expired lease is not an error: the place is free either way.
	Release(ctx context.Context, r Request, lease uint64) error
}

// Adjuster is a Store that can change a key's usage after the fact: charge
// what a request turned out to cost beyond what it reserved, or refund what
// it reserved and did not use. memstore, redisstore and failover implement
// it. Call it through Limiter.Adjust or Limiter.Settle.
type Adjuster interface {
	// Adjust charges r.Cost, a signed delta, to r.Key under r.Limit at
	// once, and returns the state after it as a peek reports it (see
	// Limiter.Adjust for the rules).
	Adjust(ctx context.Context, r Request) (Decision, error)
}
