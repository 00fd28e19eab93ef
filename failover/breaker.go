package failover

import (
	"strconv"
	"sync/atomic"
	"time"
)

// State is the state of the circuit breaker in front of the primary store.
type State uint8

const (
	// StateClosed: calls go to the primary store (the normal state).
	StateClosed State = iota
	// StateOpen: the primary failed repeatedly; calls do not reach it and
	// are decided by their failure Mode until the next probe time.
	StateOpen
	// StateHalfOpen: the probe interval has passed; one call at a time
	// goes to the primary as a probe, the others are decided by their Mode.
	// The probe's success closes the breaker, its failure opens it again.
	StateHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s State) String() string {
	switch s {
	case StateClosed:
		return "closed"
	case StateOpen:
		return "open"
	case StateHalfOpen:
		return "half-open"
	}
	return "unknown"
}

// outcome is how one call to the primary ended, as the breaker counts it.
type outcome uint8

const (
	success outcome = iota // the store answered (an admission or a refusal)
	failure                // the store failed: timeout, connection, LOADING, ...
	neutral                // not the store's fault: a validation error, the caller's cancellation
)

// buckets is how many parts the failure-ratio window is counted in; the
// window slides by one part at a time.
const buckets = 10

// breaker is the circuit breaker's state machine. It is not safe for
// concurrent use (Store guards it with a mutex) and reads no clock: every
// method takes the time, so that its behaviour is a function of its calls.
type breaker struct {
	// settings
	consecutive int           // open after this many failures in a row; 0: never
	ratio       float64       // open when failures/calls reaches this; 0: never
	minCalls    int           // ... over at least this many calls
	width       time.Duration // one bucket of the window
	interval    time.Duration // from opening to the next probe

	state     State
	run       int       // failures in a row
	lastFail  time.Time // when the last failure that counted was recorded
	nextProbe time.Time // when open: the earliest probe
	probing   bool      // when half-open: a probe is in flight
	window    [buckets]bucket
	reason    string // why it last opened, for the log

	// Successes of a closed breaker counted without its lock (succeed):
	// how many, in the slot pendingSlot, folded into window by the next
	// record.
	pending     atomic.Int64
	pendingSlot atomic.Int64
}

type bucket struct {
	slot            int64 // which width-long slot of time it counts
	calls, failures int
}

// transition is a change of state, reported to the hook and the log
// outside the breaker's lock.
type transition struct {
	from, to State
	reason   string
	next     time.Time
}

// allow reports whether a call may go to the primary now, and whether it
// is the half-open probe. It may move the breaker from open to half-open.
func (b *breaker) allow(now time.Time) (ok, probe bool, t *transition) {
	switch b.state {
	case StateClosed:
		return true, false, nil
	case StateOpen:
		if now.Before(b.nextProbe) {
			return false, false, nil
		}
		b.state, b.probing = StateHalfOpen, true
		return true, true, &transition{from: StateOpen, to: StateHalfOpen}
	default: // half-open
		if b.probing {
			return false, false, nil
		}
		b.probing = true
		return true, true, nil
	}
}

// record counts the outcome of a call that allow let through at start.
//
// A failure counts only if its call started after the last failure that
// counted was recorded. A call already in flight then tells nothing new:
// when a server stalls, every call in flight fails within one deadline of
// the others, and they are one failure, not as many as there were calls.
// So each failure that counts is one more deadline (or one more dial) of
// a primary that still fails: with calls that time out, n failures in a
// row take at least n-1 deadlines of failing, while a dead server, which
// refuses at once, still gives n of them within a few round trips. A
// failure that does not count is neutral: it neither extends the run nor
// enters the failure ratio, which therefore judges failures that recur
// over time, not a crowd of calls that failed together.
func (b *breaker) record(now, start time.Time, o outcome, probe bool) *transition {
	if probe {
		b.probing = false
		switch o {
		case success:
			b.reset()
			b.state = StateClosed
			return &transition{from: StateHalfOpen, to: StateClosed}
		case failure:
			return b.open(now, StateHalfOpen, "the half-open probe failed")
		}
		return nil // neutral: the next call probes instead
	}
	if b.state != StateClosed || o == neutral || o == failure && start.Before(b.lastFail) {
		// A call let through before the breaker opened that ends after
		// it opened tells nothing the breaker does not already know; nor
		// does a failure of a call that was in flight when the last one
		// that counted was recorded.
		return nil
	}
	b.fold(now)
	bk := b.bucket(now)
	bk.calls++
	if o == success {
		b.run = 0
		b.pendingSlot.Store(bk.slot) // the slot's next successes need no lock
		return nil
	}
	bk.failures++
	b.run++
	b.lastFail = now
	if b.consecutive > 0 && b.run >= b.consecutive {
		return b.open(now, StateClosed, plural(b.run, "consecutive failure"))
	}
	if b.ratio > 0 {
		calls, failures := b.count(now)
		if calls >= b.minCalls && float64(failures) >= b.ratio*float64(calls) {
			return b.open(now, StateClosed, plural(failures, "failure")+" in "+plural(calls, "call")+" within the window")
		}
	}
	return nil
}

func (b *breaker) open(now time.Time, from State, reason string) *transition {
	b.state, b.reason = StateOpen, reason
	b.nextProbe = now.Add(b.interval)
	b.reset()
	return &transition{from: from, to: StateOpen, reason: reason, next: b.nextProbe}
}

func (b *breaker) reset() {
	b.run, b.lastFail = 0, time.Time{}
	b.window = [buckets]bucket{}
	b.pendingSlot.Store(0) // what succeed adds after this is dropped by fold
}

// succeed counts a success of a closed breaker, made at now, without the
// lock, when an earlier success of its slot was recorded under it; it
// reports false when the caller must record it (record). The successes
// count in the slot they were made in, but for one whose goroutine was
// held up between its reading of pendingSlot and its count while the
// next slot began, which counts in the next.
func (b *breaker) succeed(now time.Time) bool {
	if b.pendingSlot.Load() != now.UnixNano()/int64(b.width) {
		return false
	}
	b.pending.Add(1)
	return true
}

// fold adds the successes counted by succeed to their bucket, and ends the
// run of failures if there were any. The lock is held.
func (b *breaker) fold(now time.Time) {
	n := b.pending.Swap(0)
	slot := b.pendingSlot.Load()
	if n == 0 || b.state != StateClosed || slot <= now.UnixNano()/int64(b.width)-buckets {
		return // none, or counted before the breaker last changed state, or out of the window
	}
	b.bucketAt(slot).calls += int(n)
	b.run = 0
}

// bucket returns the bucket counting now, emptied if it last counted an
// older slot.
func (b *breaker) bucket(now time.Time) *bucket {
	return b.bucketAt(now.UnixNano() / int64(b.width))
}

// bucketAt returns the bucket counting slot, emptied if it last counted
// another.
func (b *breaker) bucketAt(slot int64) *bucket {
	bk := &b.window[slot%buckets]
	if bk.slot != slot {
		*bk = bucket{slot: slot}
	}
	return bk
}

// count sums the buckets still inside the window ending at now.
func (b *breaker) count(now time.Time) (calls, failures int) {
	b.fold(now)
	slot := now.UnixNano() / int64(b.width)
	for _, bk := range b.window {
		if bk.slot > slot-buckets && bk.slot <= slot {
			calls += bk.calls
			failures += bk.failures
		}
	}
	return calls, failures
}

// retryAfter is how long until the next probe may go to the primary: zero
// when closed or half-open without a probe in flight.
func (b *breaker) retryAfter(now time.Time) time.Duration {
	switch {
	case b.state == StateOpen:
		return max(0, b.nextProbe.Sub(now))
	case b.state == StateHalfOpen && b.probing:
		return b.interval // the probe's verdict is due well before this
	}
	return 0
}

func plural(n int, what string) string {
	s := strconv.Itoa(n) + " " + what
	if n != 1 {
		s += "s"
	}
	return s
}
