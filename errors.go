package sluice

import "errors"

// Errors returned by sluice and its stores. They are wrapped with context
// (the limit, the key, the field); test for them with errors.Is.
var (
	// ErrInvalidLimit means a Limit's parameters make no sense; the message
	// names the algorithm and the field.
	ErrInvalidLimit = errors.New("sluice: invalid limit")

	// ErrCostExceedsCapacity means a request asked for more than the limit
	// could ever admit at once (for example cost 30 on a bucket of 20).
	// Refusing it would refuse it forever, so it is an error instead.
	ErrCostExceedsCapacity = errors.New("sluice: cost exceeds the limit's capacity")

	// ErrNegativeCost means a request's cost was below zero.
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
)
