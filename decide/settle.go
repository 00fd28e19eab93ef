package decide

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// LateCost is the cost of a check that is known only once the work is
// done: the tokens an LLM call used, the rows a query read, the bytes a
// download sent. The check reserves its Cost (an estimate, or 0) when it is
// decided, and Result.Settle charges the difference to the cost the
// response reports: more into debt (the next requests wait until it is
// paid back), less as a refund, never beyond the limit's capacity.
//
// What can be over-spent is bounded: each admitted request may use at most
// Max − Cost more than it reserved, and only the requests in flight at
// once under a key can do so before the key's debt refuses the next ones.
// A LateCost is immutable once planned; checks share it.
type LateCost struct {
	// Header names the response header field, or trailer, that reports
	// the actual cost (canonical form, "X-Tokens-Used"). A trailer wins
	// over a header of the same name.
	Header string

	// Max bounds the actual cost: a larger value is charged as Max (and
	// logged). Zero means the limit's capacity.
	Max int64

	// Missing says what is charged when the response reports no cost, or
	// one that is not a whole number in plain digits, or reports it more
	// than once. The zero value keeps the reservation.
	Missing Missing

	// MissingCost is the cost charged under MissingFixed.
	MissingCost int64

	// Strip removes Header (and the trailer) from the response the client
	// receives: the cost is between the service and its rate limiter.
	Strip bool

	// Tokens, if set, reads the cost from the LLM API call's request
	// (the reservation, Reserve) and answer (the actual cost) instead of
	// Header, which is then empty. Missing does not apply: an answer
	// without usage is charged an estimate (TokenCost).
	Tokens *TokenCost

	// When, if set, charges only responses whose status is in it (a
	// limit's count_when): the cost reserved (or reported by Header, when
	// set; read from the answer, with Tokens) stays charged for those, and
	// is refunded for every other. Header may then be empty: the
	// reservation is the cost.
	When *StatusSet
}

// Missing says what a LateCost charges when the response reports no valid
// cost.
type Missing uint8

const (
	// MissingReserve keeps the reservation: nothing is settled.
	MissingReserve Missing = iota
	// MissingMax charges LateCost.Max.
	MissingMax
	// MissingFixed charges LateCost.MissingCost.
	MissingFixed
)

// Check reports a LateCost that cannot work for a check that reserves
// reserve under limit (a valid limit): a concurrency limit (it counts
// requests in flight, not costs), a reservation outside 0 to the limit's
// capacity, a Max below the reservation or beyond what one settle may
// charge (reserve + limit.MaxAdjust(), the deepest debt a key may owe).
// A nil LateCost (a cost known before the work) takes no reservation: any
// but 0 is reported. Front-ends check the name of the header or metadata
// key themselves, then call Check.
func (lc *LateCost) Check(reserve int64, limit sluice.Limit) error {
	if lc != nil && lc.Tokens != nil && !algo.Leases(limit.Algorithm) {
		return lc.checkTokens(limit)
	}
	switch {
	case lc == nil && reserve != 0:
		return errors.New("Reserve applies only with Late (a cost the response reports)")
	case lc == nil:
		return nil
	case algo.Leases(limit.Algorithm):
		return fmt.Errorf("%s cannot settle a cost after the response", limit.Algorithm)
	case reserve < 0 || reserve > limit.Capacity():
		return fmt.Errorf("the reservation must be between 0 and the limit's capacity %d (got %d)", limit.Capacity(), reserve)
	case lc.Max < 0 || lc.Max > 0 && lc.Max < reserve:
		return fmt.Errorf("Max must be 0 (the capacity) or at least the reservation %d (got %d)", reserve, lc.Max)
	case lc.Max > reserve+limit.MaxAdjust():
		return fmt.Errorf("Max must be at most %d, the reservation and the deepest debt one settle may leave (got %d)", reserve+limit.MaxAdjust(), lc.Max)
	}
	return nil
}

// Bound returns the cost to charge for a reported cost n under a limit of
// the given capacity: n itself, or Max (and capped true) when n exceeds
// it. A negative n counts as 0: a settle refunds at most what was reserved.
func (lc *LateCost) Bound(n, capacity int64) (cost int64, capped bool) {
	if most := lc.most(capacity); n > most {
		return most, true
	}
	return max(n, 0), false
}

// most is the largest cost lc charges under a limit of the given capacity.
func (lc *LateCost) most(capacity int64) int64 {
	if lc.Max <= 0 {
		return capacity
	}
	return lc.Max
}

// Actual returns the cost to charge given the values the response carries
// for Header (nil when it has none), for a check that reserved reserved
// under a limit of the given capacity. found is false when the response
// reported no valid cost and Missing decided it; capped is true when the
// value exceeded Max.
func (lc *LateCost) Actual(values []string, reserved, capacity int64) (cost int64, found, capped bool) {
	if len(values) == 1 {
		if n, ok := plainInt(strings.TrimSpace(values[0])); ok {
			cost, capped = lc.Bound(n, capacity)
			return cost, true, capped
		}
	}
	switch lc.Missing {
	case MissingMax:
		return lc.most(capacity), false, false
	case MissingFixed:
		cost, _ = lc.Bound(lc.MissingCost, capacity)
		return cost, false, false
	}
	return reserved, false, false
}

// ActualFor is Actual for a response: 0 (a refund of what was reserved)
// when lc counts only some statuses and resp's is not one of them; without
// a Header, the reservation. found is true for a status that decided.
func (lc *LateCost) ActualFor(resp Response, reserved, capacity int64) (cost int64, found, capped bool) {
	switch {
	case !resp.counts(lc):
		return 0, true, false
	case lc.Header == "":
		return reserved, true, false
	}
	return lc.Actual(resp.values(lc.Header), reserved, capacity)
}

// plainInt parses s as a whole number in plain digits ("120", not "+120",
// "1e3" or "0x78"); a number too large for int64 is as large as it gets.
func plainInt(s string) (int64, bool) {
	if s == "" || len(s) > 64 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil { // only a range error remains
		return 1<<63 - 1, true
	}
	return n, true
}

// Settled describes the settlement of one check, for logs and tests.
type Settled struct {
	// Check is the settled check (Enforced or Shadow of the Result).
	Check *Check
	// Reserved is what it charged when it was decided, Actual what it
	// was charged in the end.
	Reserved, Actual int64
	// Found is false when the response reported no valid cost and
	// LateCost.Missing decided Actual; Capped is true when the reported
	// cost exceeded LateCost.Max.
	Found, Capped bool
	// Estimated is true when an LLM answer reported no usage for the
	// check's TokenCost, and Actual is an estimate from what it carried.
	Estimated bool
	// Err is the store's error, if the settle failed: the reservation
	// then stands.
	Err error
}

// Settle charges every check of r that reserved a LateCost the actual cost
// the response reports, read with values(name), which returns the
// response's values of a header field or trailer (nil when it has none).
// Only checks that were charged are settled: enforced checks of a request
// that went on and was counted, and shadow checks the store admitted. It
// appends one Settled per settled check to dst and returns it; a store
// error is logged (at most once a second) and leaves that reservation
// standing. Call it when the response is complete; a second call settles
// nothing. ctx should outlive the client's request (context.WithoutCancel).
func (r *Result) Settle(ctx context.Context, values func(name string) []string, dst []Settled) []Settled {
	return r.SettleResponse(ctx, Response{Values: values}, dst)
}

// Late reports whether any check of r has a LateCost that Settle would
// settle: one the store charged, not settled yet.
func (r *Result) Late() bool {
	if r.settled || r.undone || r.Outcome != Admitted && r.Outcome != Delayed && r.Outcome != AdmittedUncounted {
		return false
	}
	for i := range r.Enforced {
		if r.Enforced[i].Late != nil && r.Each[i].Allowed {
			return true
		}
	}
	for i := range r.Shadow {
		if r.Shadow[i].Late != nil && r.ShadowEach[i].Allowed {
			return true
		}
	}
	return false
}

// limitNow is the limit a settle of c charges under: Config.Relimit's,
// else c's own.
func (dc *Decider) limitNow(c *Check) sluice.Limit {
	if dc.cfg.Relimit != nil {
		if lim, ok := dc.cfg.Relimit.Relimit(c); ok {
			return lim
		}
	}
	return c.Limit
}

func (r *Result) settleOne(ctx context.Context, c *Check, reserved int64, charged bool, resp Response, dst []Settled) []Settled {
	if c.Late == nil || !charged {
		return dst
	}
	lim := r.dc.limitNow(c)
	s := Charge(c, reserved, lim, resp)
	if s.Actual != reserved {
		// Limiter.Settle with the key's Slot: both costs are at least 0
		var d sluice.Decision
		d, s.Err = r.dc.limiter.Adjust(ctx, sluice.Request{Key: c.Key, Slot: c.Slot, Limit: lim, Cost: s.Actual - reserved})
		if s.Err == nil && !c.Shadow {
			r.dc.softs.settled(c, d, s.Actual-reserved)
		}
	}
	switch {
	case s.Err != nil:
		r.dc.logError("a late cost could not be settled; the reservation stands", s.Err)
	case s.Capped:
		r.dc.logRare(&r.dc.lastCapped, "a response reported a cost above the limit's max; charged the max", "limit", c.Name, "from", c.Late.source(), "max", s.Actual)
	case !s.Found && c.Late.Tokens == nil && c.Late.Header != "" && len(resp.values(c.Late.Header)) > 0:
		r.dc.logRare(&r.dc.lastMalformed, "a response reported a cost that is not one whole number; charged what on_missing says", "limit", c.Name, "header", c.Late.Header, "charged", s.Actual)
	}
	return append(dst, s)
}

// Charge returns what check c, which reserved reserved and has a LateCost,
// is charged for the response resp under lim (the limit the settle
// charges under): the cost its header reports or its LLM answer's usage
// (TokenCost, with c.LLM the request it reserved for), bounded by
// LateCost.Max and by the deepest debt one settle may leave
// (reserved + lim.MaxAdjust()). It is the one reckoning of every settle
// (Result.Settle, the decision API's settle tokens); it charges nothing,
// and Settled.Err is nil.
func Charge(c *Check, reserved int64, lim sluice.Limit, resp Response) Settled {
	var actual int64
	var found, capped, estimated bool
	if t := c.Late.Tokens; t != nil && resp.counts(c.Late) {
		actual, estimated = t.actual(resp.usage(t.format()), c.LLM, reserved)
		actual, capped = c.Late.Bound(actual, lim.Capacity())
		found = !estimated
	} else {
		actual, found, capped = c.Late.ActualFor(resp, reserved, lim.Capacity())
	}
	// One settle charges at most Limit.MaxAdjust: a key's debt never
	// goes deeper (sluice.Limiter.Adjust). Only a limit smaller than the
	// one Max was checked against (an override's scale below 1, a reload
	// that lowered it) gets here.
	if most := reserved + lim.MaxAdjust(); actual > most {
		actual, capped = most, true
	}
	return Settled{Check: c, Reserved: reserved, Actual: actual, Found: found, Capped: capped, Estimated: estimated}
}

// Adjust charges delta, a signed amount, to c's key under c's limit at
// once (sluice.Limiter.Adjust), cut to the largest adjustment the limit
// allows (Limit.MaxAdjust) so that no amount a client sends is an error:
// a charge goes into debt, never deeper than a key may owe; a refund never
// leaves more room than the limit's capacity. It is the step for a cost
// that is charged whatever the decision (the hits of a request refused
// after its work was done: the Envoy RLS's end-of-stream hits) and for a
// cost a client gives back (is_negative_hits). It returns the state after
// it as a peek reports it; a store error is logged (at most once a
// second) and returned. Delta 0 only peeks.
func (dc *Decider) Adjust(ctx context.Context, c *Check, delta int64) (sluice.Decision, error) {
	m := c.Limit.MaxAdjust()
	delta = max(-m, min(delta, m))
	d, err := dc.limiter.Adjust(ctx, sluice.Request{Key: c.Key, Slot: c.Slot, Limit: c.Limit, Cost: delta, OnError: c.OnError})
	if err != nil {
		dc.logError("a charge or refund outside a check could not be made", err)
	}
	return d, err
}
