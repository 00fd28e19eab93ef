package sluice

import "errors"

// Errors returned by sluice and its stores. They are wrapped with context
// (the limit, the key, the field); test for them with errors.Is.
var (
	// ErrInvalidLimit means a Limit's parameters make no sense. The error
	// is a *LimitError naming the algorithm and the field.
	ErrInvalidLimit = errors.New("sluice: invalid limit")

	// ErrCostExceedsCapacity means a request asked for more than the limit
	// could ever admit at once (for example cost 30 on a bucket of 20).
	// Refusing it would refuse it forever, so it is an error instead. The
	// error is a *LimitError whose Field is "cost".
	ErrCostExceedsCapacity = errors.New("sluice: cost exceeds the limit's capacity")

	// ErrNegativeCost means a request's cost was below zero. The error is
	// a *LimitError whose Field is "cost".
	ErrNegativeCost = errors.New("sluice: negative cost")

	// ErrNegativeMaxDelay means a request's MaxDelay was below zero (zero
	// means no bound).
	ErrNegativeMaxDelay = errors.New("sluice: negative max delay")

	// ErrDuplicateRequest means one Check named the same key with the same
	// limit twice; merge the two into one request with the summed cost.
	ErrDuplicateRequest = errors.New("sluice: the same key and limit appear twice in one check")

	// ErrWouldExceedDeadline is returned by Wait when the time until the
	// request could be admitted is longer than the context allows.
	ErrWouldExceedDeadline = errors.New("sluice: waiting would exceed the context deadline")

	// ErrClosed is returned by a store that has been closed.
	ErrClosed = errors.New("sluice: store closed")

	// ErrNotAdjustable means an adjustment (Limiter.Adjust or Settle) was
	// asked of a store that cannot adjust (it does not implement
	// Adjuster), or of a limit whose state is not usage: a concurrency
	// limit holds leases, which are given back with Release. With a limit,
	// the error is a *LimitError whose Field is "algorithm".
	ErrNotAdjustable = errors.New("sluice: cannot adjust")
)

// LimitError says what is wrong with a limit, or with a cost under a limit:
// Limit.Validate, Limit.Scale, ParseAlgorithm and every store return one.
// It wraps its sentinel (ErrInvalidLimit, ErrCostExceedsCapacity or
// ErrNegativeCost), so errors.Is works; use errors.As to read its fields,
// for example to name the field of a configuration file at fault, and
// Detail to print it without the sentinel's prefix.
type LimitError struct {
	// Algorithm is the limit's algorithm, zero when it is not set or not
	// known.
	Algorithm Algorithm
	// Field names the parameter at fault as configuration files write it
	// ("count", "window", "period", "burst", "queue", "nodelay", "warmup",
	// "lease_ttl", "algorithm", "scale" or "cost").
	Field string
	// Reason completes the sentence Field starts: "must be at least 1
	// (got 0)".
	Reason string
	// Err is the sentinel the error wraps.
	Err error
}

// Error returns the sentinel's message and Detail: "sluice: invalid limit:
// token_bucket: burst must be at least 1 (got 0)".
func (e *LimitError) Error() string { return e.Err.Error() + ": " + e.Detail() }

// Unwrap returns the sentinel, for errors.Is.
func (e *LimitError) Unwrap() error { return e.Err }

// Detail is the message without the sentinel: the algorithm (when known),
// the field and the reason, as in "token_bucket: burst must be at least 1
// (got 0)".
func (e *LimitError) Detail() string {
	s := e.Reason
	if e.Field != "" {
		s = e.Field + " " + s
	}
	if e.Algorithm.known() {
		s = e.Algorithm.String() + ": " + s
	}
	return s
}
