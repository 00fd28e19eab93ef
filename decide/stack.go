package decide

import (
	"context"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// Stacked front-ends. A request may pass several front-ends of one process
// in turn: an httplimit middleware per client IP around a whole router and
// another per user around one route, or two chained grpclimit interceptors.
// Each decides its own checks, with its own Limiter; stacked, they answer as
// one front-end would:
//
//   - A front-end that lets a request go on records its Result in the
//     request's context (Stack).
//   - A front-end further in that does not let it go on (refused, invalid,
//     failed) undoes what those further out charged (UndoOuter): the
//     request is all or nothing, as the checks of one front-end are.
//   - The header fields of each are joined to those further out
//     (StackedFields): one list of every limit applied.
//
// Every front-end charges when it decides, and undoes later: a front-end
// cannot know, before its handler runs, whether another front-end will see
// the request (a router sends one route through a second middleware and
// another route straight to its handler), and a charge deferred to a
// front-end that never comes would let the handler run uncounted. So the
// undo is a refund (Limiter.Adjust) after the charge, not part of one atomic
// check: between the two, another request can find a limit further out one
// request fuller than it ends (a refusal it would not have had), never
// emptier. Front-ends on different Limiters and stores stack the same way:
// each charge is refunded by the Limiter that made it. A refund the store
// cannot make is logged, and that charge stands.
//
// Only front-ends that answer the same response stack: a handler that
// dispatches a request of its own (a batch endpoint calling its router
// with the request's context) is one request further out whatever its
// sub-requests get, so a refusal of a sub-request undoes nothing.

// stackKey is the context key of the innermost stacked Result.
type stackKey struct{}

// stacked is one front-end's Result in a request's context, and the context
// itself: one allocation per stacked front-end.
type stacked struct {
	context.Context
	outer  *stacked // the front-end further out, or nil
	res    *Result
	resp   any    // identifies the response the front-ends answer
	before Fields // the fields the response had before the outermost wrote
}

func (s *stacked) Value(key any) any {
	if key == (stackKey{}) {
		return s
	}
	return s.Context.Value(key)
}

// Stack returns ctx carrying res, a decided Result whose request goes on,
// for the front-ends further in: they join their header fields to res's
// (StackedFields) and undo res if they do not let the request go on
// (UndoOuter). resp identifies the response the front-ends answer, a
// comparable value (httplimit: the identity of the response's header map;
// grpclimit: nil, a call's interceptors answer one call); a front-end
// further in stacks only on the same resp. before are the header fields
// the response carried before the outermost front-end wrote its own (kept
// by the outermost; see StackedFields).
//
// res must stay as it is while the request is handled: a front-end stacks
// the Result it holds until its handler returns.
func Stack(ctx context.Context, res *Result, resp any, before Fields) context.Context {
	s := &stacked{Context: ctx, res: res, resp: resp, before: before}
	if o := outerOf(ctx, resp); o != nil {
		s.outer, s.before = o, o.before
	}
	return s
}

// outerOf returns the innermost Result stacked on ctx for resp, or nil.
func outerOf(ctx context.Context, resp any) *stacked {
	s, _ := ctx.Value(stackKey{}).(*stacked)
	if s == nil || s.resp != resp {
		return nil
	}
	return s
}

// UndoOuter undoes (Result.Undo) every Result stacked on ctx for resp: a
// front-end that does not let a request go on calls it, so that the
// front-ends further out charge nothing for it either.
func UndoOuter(ctx context.Context, resp any) {
	for s := outerOf(ctx, resp); s != nil; s = s.outer {
		s.res.Undo(context.WithoutCancel(ctx)) // a client gone must not keep the charge
	}
}

// StackedFields returns f, the header fields of one front-end, joined
// after those of the front-ends stacked further out on ctx for resp
// (outermost first, as they were when the request was decided or undone)
// and after the fields the response carried before the outermost of them
// wrote its own: before, when f's front-end is the outermost. One list of
// every limit applied to the request (Fields.Join).
func StackedFields(ctx context.Context, resp any, before, f Fields) Fields {
	if s := outerOf(ctx, resp); s != nil {
		return s.fields().Join(f)
	}
	return before.Join(f)
}

// fields returns the joined fields of s and the front-ends further out.
func (s *stacked) fields() Fields {
	if s.outer == nil {
		return s.before.Join(s.res.Fields())
	}
	return s.outer.fields().Join(s.res.Fields())
}

// Join returns the fields of f followed by those of g: RateLimit-Policy
// and RateLimit are Structured Field lists, so their members are
// concatenated, and Retry-After is the longer wait of the two.
func (f Fields) Join(g Fields) Fields {
	return Fields{
		Policy:     joinList(f.Policy, g.Policy),
		RateLimit:  joinList(f.RateLimit, g.RateLimit),
		RetryAfter: longer(f.RetryAfter, g.RetryAfter),
	}
}

func joinList(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + ", " + b
}

// longer returns the longer of two Retry-After values in seconds; a value
// that is not a whole number of seconds (an HTTP date another component
// sent) is kept over a number.
func longer(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	na, errA := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
	nb, errB := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
	switch {
	case errA != nil:
		return a
	case errB != nil || nb > na:
		return b
	}
	return a
}

// Undo gives back what r charged, for a request that does not go on after
// all: a front-end stacked further in refused it (UndoOuter). Each check
// the store charged, enforced or shadow, is refunded its cost
// (sluice.Limiter.Adjust, as one atomic step on its key), and each lease is
// released; Settle then settles nothing, and Each (with Decision) reports
// what is left after the refund, for the header fields. A refund the store
// cannot make is logged, and that charge stands. Undo does nothing to a
// Result whose request did not go on, or that was undone already.
func (r *Result) Undo(ctx context.Context) {
	if r.undone || !r.Proceed() {
		return
	}
	r.undone = true
	r.Release()
	r.refund(ctx, r.reqs, r.Each)
	r.refund(ctx, r.shadowReqs, r.ShadowEach)
	if r.DecidedBy() != nil {
		r.Decision.Remaining, r.Decision.ResetAfter = r.Each[r.Decided].Remaining, r.Each[r.Decided].ResetAfter
	}
}

// refund gives back the cost of each of reqs that each says was charged.
// A concurrency limit's charge is its lease, which Release gave back.
func (r *Result) refund(ctx context.Context, reqs []sluice.Request, each []sluice.Decision) {
	for i := range reqs {
		q := reqs[i]
		switch {
		case !each[i].Allowed || q.Cost == 0:
			continue
		case algo.Leases(q.Limit.Algorithm):
			each[i].Remaining = min(each[i].Remaining+q.Cost, q.Limit.Capacity())
			continue
		}
		d, err := r.dc.limiter.Adjust(ctx, sluice.Request{Key: q.Key, Slot: q.Slot, Limit: q.Limit, Cost: -q.Cost, OnError: q.OnError})
		if err != nil {
			r.dc.logError("a charge of a request refused further in could not be given back; it stands", err)
			continue
		}
		each[i].Remaining, each[i].ResetAfter = d.Remaining, d.ResetAfter
	}
}

// Undone reports whether Undo gave back what r charged.
func (r *Result) Undone() bool { return r.undone }
