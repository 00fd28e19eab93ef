package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/problem"
	"github.com/sluicehq/sluice/llmusage"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server/internal/snapshot"
)

// maxSettleCost bounds the actual cost of a settle: costs add up in
// Redis's Lua as doubles, exact to 2^53.
const maxSettleCost = 1 << 50

// settleRequest is the body of POST /v1/settle: a token /v1/check returned
// and the actual cost of the work it admitted.
type settleRequest struct {
	Token string `json:"token"`
	// Cost is the actual cost; absent, each limit's cost.on_missing
	// decides (explicit checks keep their reservation).
	Cost *int64 `json:"cost"`
	// Status is the outcome's status (an HTTP status code): a limit with
	// count_when stays charged only for the statuses it names. Absent,
	// such a limit stays charged.
	Status *int `json:"status"`
	// Usage is what the LLM call used, for the limits that count its
	// tokens or price (cost: {tokens} or {prices}): they are charged from
	// it as the gateway charges an answer's usage, the price that of the
	// model the check reserved for. Cost then settles the other limits.
	Usage *apiUsage `json:"usage"`
}

// settleResponse says what each check of the token was charged.
type settleResponse struct {
	Settled []apiSettled `json:"settled"`
}

type apiSettled struct {
	Name      string `json:"name"`
	Key       string `json:"key"`
	Reserved  int64  `json:"reserved"`
	Charged   int64  `json:"charged"`
	Capped    bool   `json:"capped,omitempty"`
	Remaining int64  `json:"remaining"`
	// Estimated: the usage did not report what the limit counts (an
	// output for a price): the reservation stands.
	Estimated bool `json:"estimated,omitempty"`
}

// settleMax reads an explicit check's settle_max: nil when absent (its
// cost is final), else a LateCost with that bound, which must be at least
// the reservation.
func settleMax(field string, v *int64, reserved int64, lim sluice.Limit) (*decide.LateCost, error) {
	if v == nil {
		return nil, nil
	}
	most := min(maxSettleCost, reserved+lim.MaxAdjust()) // the deepest debt one settle may leave
	if *v < max(1, reserved) || *v > most {
		return nil, fmt.Errorf("%s.settle_max: must be between the reservation (hits, %d) and %d (hits and four times the limit's capacity) (got %d)", field, max(1, reserved), most, *v)
	}
	return &decide.LateCost{Max: *v}, nil
}

// settleEntries lists what a token of res settles: its checks with a late
// cost that were charged.
func settleEntries(res *decide.Result, explicit bool) []settleEntry {
	var es []settleEntry
	for i, c := range res.Enforced {
		if c.Late != nil && res.Each[i].Allowed {
			es = append(es, settleEntry{name: c.Name, key: c.Key, limit: c.Limit, reserved: c.Cost, late: *c.Late, explicit: explicit, override: c.Override, slot: c.Slot, llm: c.LLM})
		}
	}
	for i, c := range res.Shadow {
		if c.Late != nil && res.ShadowEach[i].Allowed {
			es = append(es, settleEntry{name: c.Name, key: c.Key, limit: c.Limit, reserved: c.Cost, late: *c.Late, override: c.Override, slot: c.Slot, llm: c.LLM})
		}
	}
	return es
}

// tokenStatus is the status of a token that cannot be settled.
func tokenStatus(err error) int {
	switch {
	case errors.Is(err, errTokenForged):
		return http.StatusForbidden
	case errors.Is(err, errTokenExpired):
		return http.StatusGone
	case errors.Is(err, errTokenSpent):
		return http.StatusConflict
	case errors.Is(err, errTokensFull), errors.Is(err, errSpentUnknown):
		return http.StatusServiceUnavailable
	}
	return http.StatusBadRequest
}

func (ap *API) settleHandler(w http.ResponseWriter, r *http.Request) {
	var req settleRequest
	if err := decode(w, r, &req); err != nil {
		problem.Write(w, http.StatusBadRequest, "Bad Request", err.Error(), nil)
		return
	}
	if req.Token == "" {
		problem.Write(w, http.StatusBadRequest, "Bad Request", "token: the settle_token /v1/check returned is required", nil)
		return
	}
	if req.Status != nil && (*req.Status < 100 || *req.Status > 599) {
		problem.Write(w, http.StatusBadRequest, "Bad Request", fmt.Sprintf("status: must be an HTTP status code from 100 to 599 (got %d)", *req.Status), nil)
		return
	}
	if req.Cost != nil && (*req.Cost < 0 || *req.Cost > maxSettleCost) {
		problem.Write(w, http.StatusBadRequest, "Bad Request", fmt.Sprintf("cost: must be between 0 and %d (got %d)", int64(maxSettleCost), *req.Cost), nil)
		return
	}
	var usage *llmusage.Usage
	if req.Usage != nil {
		u, err := req.Usage.read()
		if err != nil {
			problem.Write(w, http.StatusBadRequest, "Bad Request", err.Error(), nil)
			return
		}
		usage = &u
	}
	entries, id, err := ap.settle.redeem(req.Token)
	if err == nil && usage != nil && !slices.ContainsFunc(entries, func(e settleEntry) bool { return e.llm != nil }) {
		ap.settle.unspend(id) // not spent in the store yet
		problem.Write(w, http.StatusBadRequest, "Bad Request", "usage: the check of this token reserved no LLM tokens; settle it with cost", nil)
		return
	}
	if err == nil && ap.settle.shared {
		err = ap.markSpent(r.Context(), id)
	}
	if err != nil {
		st := tokenStatus(err)
		problem.Write(w, st, http.StatusText(st), err.Error(), nil)
		return
	}
	resp := settleResponse{Settled: []apiSettled{}}
	for i, e := range entries {
		a, err := ap.settleEntry(r, &e, req.Cost, req.Status, usage)
		label := e.name
		if e.explicit {
			label = "explicit" // names chosen by callers: unbounded
		}
		found := req.Cost != nil || usage != nil && e.llm != nil && !a.Estimated
		ap.cfg.Settled(label, a.Charged, found, a.Capped, err)
		if err != nil {
			if i == 0 {
				ap.unspend(r.Context(), id) // nothing settled: the token may be tried again
			}
			ap.logError(err)
			problem.Write(w, http.StatusServiceUnavailable, "Service Unavailable", fmt.Sprintf("The store could not settle %q (%d of %d settled): %v", e.name, i, len(entries), err), nil)

			return
		}
		resp.Settled = append(resp.Settled, a)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// settleEntry charges one check of a token its actual cost: from usage
// when its limit counts LLM tokens (chargeUsage), else cost, bounded by
// the check's max, or what its on_missing says when cost is nil. A
// policy check is charged under its limit as the policy in force when the
// settle arrived has it (policy.Policy.Relimit), an explicit one under the
// limit it gave.
func (ap *API) settleEntry(r *http.Request, e *settleEntry, cost *int64, status *int, usage *llmusage.Usage) (apiSettled, error) {
	p := snapshot.Of(r)
	lim := e.limit
	if !e.explicit {
		lim, _ = p.Relimit(&decide.Check{Name: e.name, Key: e.key, Limit: e.limit, Override: e.override})
	}
	capacity := lim.Capacity()
	var actual int64
	var capped, estimated bool
	t := tokensOf(p, e)
	switch {
	case !outcomeCounts(p, e, status):
		actual = 0 // count_when names other statuses: the reservation is refunded
	case t != nil && usage != nil:
		s := chargeUsage(e, t, usage, lim)
		actual, capped, estimated = s.Actual, s.Capped, s.Estimated
	case cost != nil:
		actual, capped = e.late.Bound(*cost, capacity)
	default:
		actual, _, _ = e.late.Actual(nil, e.reserved, capacity)
	}
	actual = min(actual, e.reserved+lim.MaxAdjust()) // a key's debt goes no deeper
	a := apiSettled{Name: e.name, Key: e.key, Reserved: e.reserved, Charged: actual, Capped: capped, Estimated: estimated}
	// Limiter.Settle with the key's slot: both costs are at least 0
	d, err := ap.cfg.Limiter.Adjust(context.WithoutCancel(r.Context()),
		sluice.Request{Key: e.key, Slot: e.slot, Limit: lim, Cost: actual - e.reserved})
	if err != nil {
		return a, err
	}
	a.Remaining = max(0, d.Remaining)
	return a, nil
}

// markSpent records in the store that the token id has been settled, for
// the instances that share the secret and the store: a sliding log of one
// per token lifetime admits the first settle and refuses any other while
// the token lives. A store that cannot say refuses the settle (503); the
// token can be sent again.
func (ap *API) markSpent(ctx context.Context, id uint64) error {
	d, err := ap.cfg.Limiter.Check(context.WithoutCancel(ctx), ap.spentMark(id, 1))
	switch {
	case err != nil:
		ap.settle.unspend(id)
		ap.logError(err)
		return fmt.Errorf("%w: %v", errSpentUnknown, err)
	case !d.Allowed:
		return errTokenSpent
	}
	return nil
}

// spentMark is the store request that marks token id spent (cost 1) or
// takes the mark back (cost -1, through Adjust).
func (ap *API) spentMark(id uint64, cost int64) sluice.Request {
	key := string(decide.AppendKey(nil, "", "settle", strconv.FormatUint(id, 16)))
	return sluice.Request{Key: key, Limit: sluice.SlidingLog(1, ap.settle.ttl), Cost: cost, OnError: sluice.FailClosed}
}

// unspend gives back a token none of whose checks could be settled, here
// and, with a shared secret, in the store. If the store cannot take its
// mark back, the token stays spent: never settled twice.
func (ap *API) unspend(ctx context.Context, id uint64) {
	if ap.settle.shared {
		if _, err := ap.cfg.Limiter.Adjust(context.WithoutCancel(ctx), ap.spentMark(id, -1)); err != nil {
			return
		}
	}
	ap.settle.unspend(id)
}

// hitsLate is a policy limit's late cost for a check of hits requests at
// once, which reserved reserved: its max (and a fixed on_missing cost)
// count per request too, bounded by what one settle may charge. Without
// it, a settle of the batch's actual cost would be capped at one
// request's max, and refund what the batch used.
func hitsLate(lc *decide.LateCost, hits, reserved int64, lim sluice.Limit) *decide.LateCost {
	most := reserved + lim.MaxAdjust()
	scaled := *lc
	scaled.Max, scaled.MissingCost = scaledCost(lc.Max, hits, most), scaledCost(lc.MissingCost, hits, most)
	scaled.Max = max(scaled.Max, reserved)
	return &scaled
}

// scaledCost is n × hits, at most most (and without overflow).
func scaledCost(n, hits, most int64) int64 {
	if n > most/hits {
		return most
	}
	return min(n*hits, most)
}

// outcomeCounts reports whether a settle with status keeps e charged: it
// does unless e's limit counts only some statuses (count_when, as the
// policy in force has it) and status is given and not one of them.
func outcomeCounts(p *policy.Policy, e *settleEntry, status *int) bool {
	if status == nil || e.explicit || p == nil {
		return true
	}
	_, l := p.FindLimit(e.name)
	if l == nil {
		return true
	}
	when := l.CountWhen()
	return when == nil || when.Has(*status)
}
