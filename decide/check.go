// Package decide is the one decision path of every sluice front-end: the
// HTTP middleware (httplimit), the gRPC interceptors (grpclimit), and sluice
// serve's gateway, decision API and Envoy rate limit service.
//
// Every front-end does the same five things; only the first and the last
// are its own:
//
//	read its input      an HTTP request, a gRPC call, RLS descriptors, JSON
//	plan                the Checks of the request: which limits, under which
//	                    keys (built by AppendKey, bounded by KeyValue), what
//	                    cost, what failure mode, what action on refusal;
//	                    input the client got wrong ends here, as a
//	                    ClientError (a 4xx), never as an admission
//	run                 Decider.Run: enforced checks all or nothing, shadow
//	                    checks after them, waits, failure modes
//	outcome             Result: admitted, delayed, refused, degraded, failed
//	                    or invalid, with the check that decided
//	answer              headers and a 429 problem document, RESOURCE_EXHAUSTED
//	                    with RetryInfo, RLS statuses, JSON
//	settle              for a cost known only after the work (Check.Late):
//	                    Result.Settle charges what the response reports;
//	                    Result.SettleResponse also keeps a reservation only
//	                    for the statuses LateCost.When names (count_when)
//
// A check with a Ban is planned with its ban's check (BanCheck); Run
// starts the ban when that check's limit refuses, and the ban's check
// refuses the key until it ends.
//
// A check with When (a Relation) applies only while another limit is busy
// (Sentinel's RELATE): Run first peeks at the related limit's counter for
// the request, in a store call of its own and reused for a short while
// (Config.RelateFor), and leaves the check out, uncharged, in Result.Idle
// while that limit is at or under the share. A check that applies only to
// calls through an entry (CHAIN, sluice.WithEntry) is the front-end's to
// plan or not: it knows the entry.
//
// Front-ends of one process stack (an httplimit middleware per IP around a
// router and another per user around one route): each records its Result
// in the request's context (Stack), one that refuses undoes what those
// further out charged (UndoOuter), and their header fields join
// (StackedFields), so the request is all or nothing across them.
//
// What the lower layers need travels down with each check (its failure mode
// in sluice.Request.OnError, its longest delay in sluice.Request.MaxDelay,
// the part of its key that chooses its Cluster slot in sluice.Request.Slot);
// the limiter reports which request decided. Nothing is recovered later by
// parsing a key or comparing decisions.
package decide

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/llmusage"
)

// Check is one limit to charge for one request, as a front-end plans it.
type Check struct {
	// Name identifies the limit in answers, logs and metrics. It comes
	// from configuration, never from the request, so it is bounded.
	Name string
	// Key is the store key, built with AppendKey.
	Key string
	// Slot is the part of Key that chooses where a store spread over
	// shards keeps it (sluice.Request.Slot): for a policy rule with
	// one_slot, the rule's part of its keys; empty for the whole key.
	// It is set when the check is planned, and every later use of the key
	// (settle, release, undo) goes with it.
	Slot string
	// Limit and Cost are what is charged. Cost 0 peeks.
	Limit sluice.Limit
	Cost  int64
	// Override names the override of the source's limit that set Limit
	// ("" for the limit's own), so that a settle after a reload can find
	// the same one (Relimiter).
	Override string
	// Late, if set, makes Cost a reservation: the actual cost comes with
	// the response, and Result.Settle charges the difference.
	Late *LateCost
	// LLM is what the LLM API request asks for, when Late reads tokens
	// (LateCost.Tokens): set by Reserve, read by the settle. Checks of one
	// request share it.
	LLM *llmusage.Request
	// Soft is the share of the limit's capacity, in thousandths (800 is
	// 80%), past which an admission warns (PastSoft) and a key that
	// passes it is counted and logged once (Config.OnSoft); 0: none.
	Soft int64
	// Shadow checks are counted and reported, never enforced: they run
	// after the enforced checks of an admitted request.
	Shadow bool
	// OnError is what happens to the request when the store cannot decide
	// this check (see sluice.FailureMode); FailDefault leaves it to the
	// store, and to Config.OnError when the store returns its error.
	OnError sluice.FailureMode
	// Action says what happens when this check refuses; nil rejects with
	// the front-end's default answer.
	Action *Action
	// Ban, if set, bans the key for a while when this check refuses it
	// (see Ban); the front-end plans BanCheck beside it.
	Ban *Ban
	// When, if set, makes the check apply only while another limit is
	// busy (see Relation): otherwise Run neither checks nor charges it,
	// and lists it in Result.Idle.
	When *Relation
	// Err reports that the check could not be planned for a reason that is
	// not the client's (a key function failed). Run applies OnError: a
	// FailClosed check refuses the request, any other is left out and the
	// rest are checked.
	Err error
}

// Action says what happens when a check refuses. The zero value rejects.
type Action struct {
	// Wait makes the request wait until it is admitted, for at most
	// MaxDelay, before it is refused. Only front-ends that can hold a
	// request (httplimit, grpclimit) wait; the others refuse at once.
	Wait     bool
	MaxDelay time.Duration
	// Status, ContentType and Body replace an HTTP front-end's default
	// refusal (429, application/problem+json).
	Status      int
	ContentType string
	Body        []byte
}

// ClientError is an error in what the client sent: a cost header that is
// not a whole number in range, a path that cannot be normalised, a missing
// key part a limit requires. Front-ends answer it with a 4xx (Status) and
// charge nothing; it never admits.
type ClientError struct {
	// Status is the HTTP status to answer with: 400 unless set.
	Status int
	// Limit names the limit whose planning failed, if one did.
	Limit string
	// Field names what was wrong ("header X-Cost", "path").
	Field string
	// Reason says what was wrong with it, for the client.
	Reason string
}

func (e *ClientError) Error() string {
	s := e.Field + ": " + e.Reason
	if e.Limit != "" {
		s = fmt.Sprintf("limit %q: %s", e.Limit, s)
	}
	return s
}

// HTTPStatus is the status a front-end answers e with.
func (e *ClientError) HTTPStatus() int {
	if e.Status == 0 {
		return 400
	}
	return e.Status
}

// AsClientError returns the ClientError in err's chain, if there is one.
func AsClientError(err error) (*ClientError, bool) {
	var ce *ClientError
	ok := errors.As(err, &ce)
	return ce, ok
}

// Outcome is what happened to a request.
type Outcome uint8

const (
	// Admitted requests go on at once.
	Admitted Outcome = iota + 1
	// Delayed requests go on after a shaping delay or a wait.
	Delayed
	// Refused requests are answered with a refusal (429).
	Refused
	// ShadowRefused marks an observation of a shadow check that would
	// have refused; the request itself goes on.
	ShadowRefused
	// AdmittedUncounted requests go on without having been counted: the
	// store failed and the failure mode (open) admitted them. (A decision
	// the fallback made without the store is Admitted or Refused with
	// Decision.Degraded set: "degraded" means decided without the store.)
	AdmittedUncounted
	// Failed requests could not be decided and are refused (503): the
	// store failed under a closed failure mode, or a limit was invalid.
	Failed
	// Invalid requests carried input no limit could be checked with (a
	// ClientError): answered with a 4xx, nothing charged.
	Invalid
	// ShadowAdmitted marks an observation of a shadow check that would
	// have admitted. With ShadowRefused it tells what share of the traffic
	// a shadow limit sees it would refuse.
	ShadowAdmitted
)

var outcomeNames = [...]string{"", "admitted", "delayed", "refused", "shadow_refused", "admitted_uncounted", "failed", "invalid", "shadow_admitted"}

// NearLimitPercent is the share of a limit used, in percent, from which an
// admitted request counts as near the limit (NearLimit): as in
// envoyproxy/ratelimit's near_limit statistic, 80.
const NearLimitPercent = 80

// NearLimit reports whether o admitted a request (at once or after a delay)
// that left at least NearLimitPercent of the deciding limit used: a limit
// often near refusing is a limit about to refuse. It is false for
// observations without a decision (failures, RLS outcomes).
func NearLimit(o Observation) bool {
	d := o.Decision
	if o.Outcome != Admitted && o.Outcome != Delayed || !d.Allowed || d.Limit <= 0 {
		return false
	}
	used := d.Limit - max(d.Remaining, 0)
	return used*100 >= d.Limit*NearLimitPercent
}

// String returns the snake_case name of o, for metric labels.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o != 0 {
		return outcomeNames[o]
	}
	return "unknown"
}

// Observation describes one decided check group, for Config.Observe: the
// enforced checks of a request, or its shadow checks.
type Observation struct {
	// Limit and Key are the deciding check's name and store key (empty
	// when the request failed before any check was planned).
	Limit, Key string
	Outcome    Outcome
	// Decision is the deciding check's decision; Decision.Degraded tells a
	// decision made without the intended store.
	Decision sluice.Decision
	// Err is the error of a Failed, AdmittedUncounted or Invalid request.
	Err error
	// Banned is the ban this refusal started (Check.Ban), 0 when it
	// started none: Key is then banned for that long.
	Banned time.Duration
}
