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

	// ErrDuplicateRequest means one Check named the same key twice with
	// limits that share its state (the same limit, or the same algorithm
	// and Version: see Limit.Shares); merge them into one request with the
	// summed cost.
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
	// "lease_ttl", "calendar", "timezone", "algorithm", "scale" or "cost").
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

// IsRequestError reports whether err is about the request itself, so that
// no store could decide it: an invalid limit, a cost over the capacity or
// below zero, a negative MaxDelay, a key and limit named twice in one
// check, an adjustment of what cannot be adjusted. Such an error is a
// planning or configuration bug, never a failure of the store: a failure
// mode must not admit the request, and a circuit breaker must not count
// it. This is the one list of them; front-ends and store wrappers ask it
// instead of keeping their own.
func IsRequestError(err error) bool {
	return errors.Is(err, ErrInvalidLimit) || errors.Is(err, ErrCostExceedsCapacity) ||
		errors.Is(err, ErrNegativeCost) || errors.Is(err, ErrNegativeMaxDelay) ||
		errors.Is(err, ErrDuplicateRequest) || errors.Is(err, ErrNotAdjustable)
}
