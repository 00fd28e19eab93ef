package rls

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/algo"
	"go.yaml.in/yaml/v3"
)

// Counting says how the limits of one request are charged.
type Counting uint8

const (
	// CountAllOrNothing charges the enforced limits of a request in one
	// sluice Check: if any refuses, the others are not charged, and those
	// that refused are charged their hits into a bounded debt. sluice's
	// default.
	CountAllOrNothing Counting = iota + 1
	// CountPeer counts as envoyproxy/ratelimit does: each descriptor on
	// its own, in request order, refused hits included, so that a key over
	// its limit stays over until its window ends whatever the hits of
	// later requests. Shadow and quota limits are counted the same way.
	CountPeer
)

var countingNames = [...]string{CountAllOrNothing: "all-or-nothing", CountPeer: "peer"}

// String returns "all-or-nothing" or "peer", the names ParseCounting reads.
func (c Counting) String() string {
	if c != 0 && int(c) < len(countingNames) {
		return countingNames[c]
	}
	return fmt.Sprintf("Counting(%d)", uint8(c))
}

// ParseCounting returns the Counting named "all-or-nothing" or "peer".
func ParseCounting(s string) (Counting, error) {
	for c, name := range countingNames {
		if name != "" && s == name {
			return Counting(c), nil
		}
	}
	return 0, fmt.Errorf("rls: unknown counting %q (want all-or-nothing or peer)", s)
}

// domainOptions reads a file's top-level sluice block: counting, the
// domain's Counting (envoyproxy/ratelimit refuses a file with this block;
// to keep files it can read, use Options.Counting).
func (b blockReader) domainOptions(n *yaml.Node, w where) Counting {
	f := b.Fields(n, w, "sluice", "counting")
	v := f["counting"]
	if v == nil {
		return 0
	}
	s, ok := b.Str(v, w, "sluice.counting")
	if !ok {
		return 0
	}
	c, err := ParseCounting(s)
	if err != nil {
		b.Fail(v, w, "sluice.counting", "unknown counting %q (want all-or-nothing or peer)", s)
	}
	return c
}

// peerLimit is the limit a rule is counted under in CountPeer: for
// envoyproxy/ratelimit's fixed window (and requests_per_unit 0), a fixed
// window one larger, whose last unit marks "over". The peer's counter n
// goes past the limit L; sluice's count m stays at min(n, L+1), which
// answers alike: over when m > L, remaining L-m otherwise. A rule with
// another algorithm (a sluice block) is counted under its own limit,
// each descriptor on its own, refused hits charged into a bounded debt. Either keeps
// lim's calendar period and Version.
func peerLimit(lim sluice.Limit, rpu uint32, period time.Duration) sluice.Limit {
	if rpu == 0 || algo.Aligned(lim.Algorithm) {
		p := sluice.FixedWindow(int64(rpu)+1, period)
		p.Calendar, p.Zone, p.Version = lim.Calendar, lim.Zone, lim.Version
		if p.Calendar != 0 {
			p.Period = 0
		}
		return p
	}
	return lim
}

// overMarked reports whether r is counted with the extra "over" unit of
// peerLimit.
func (r *rule) overMarked() bool {
	return algo.Aligned(r.peer.Algorithm) && r.peer != r.limit
}

// peerCounter charges the requests of a domain counted under CountPeer,
// through the same Decider as the all-or-nothing checks.
type peerCounter struct {
	dc  *decide.Decider
	adj *adjuster // refunds, and the log of store errors
	// stopWhenOver is Options.StopIncrementWhenOverLimit.
	stopWhenOver bool
}

// run decides a request under CountPeer: each descriptor with a limit
// is charged on its own, in request order, so that a descriptor that
// appears twice is counted twice and the second sees the first's hits.
// With Options.StopIncrementWhenOverLimit (envoyproxy/ratelimit's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT), the counters are read first,
// and if any descriptor would be over, only those that would be over are
// charged.
func (p *peerCounter) run(ctx context.Context, r *request) error {
	for i := range r.items {
		if it := &r.items[i]; it.result == 0 {
			it.key = r.peerKey(i)
		}
	}
	if p.stopWhenOver {
		if err := p.peek(ctx, r); err != nil {
			return err
		}
	}
	for i := range r.items {
		it := &r.items[i]
		if it.result != 0 {
			continue
		}
		if it.refund {
			if err := p.refund(ctx, r.req.Domain, it); err != nil {
				return err
			}
			continue
		}
		d, over, err := p.take(ctx, &r.res, it)
		if err != nil {
			return storeError(ctx, p.adj.logs, r.req.Domain, err)
		}
		it.d, it.over = d, over
		r.peerCounts(i)
		switch {
		case !over:
			it.result = ResultOK
		case it.rule.shadow:
			it.result = ResultShadowOverLimit
		default:
			it.result = ResultOverLimit
		}
	}
	return nil
}

// peerKey is the counter of item i under CountPeer: envoyproxy/ratelimit
// keys a counter by the descriptor's entries and the start of its window,
// so a descriptor's own limit counts on the configured limit's counter
// when both have the same window (a fixed window of the same period), and
// apart otherwise.
func (r *request) peerKey(i int) string {
	if it := &r.items[i]; it.shares {
		return key(r.req.Domain, r.req.Descriptors[i].Entries, nil)
	}
	return r.key(i)
}

// refund is adjuster.refund under CountPeer: the counter of an
// over-marked limit reports one unit less left than it holds.
func (p *peerCounter) refund(ctx context.Context, domain string, it *item) error {
	if err := p.adj.refund(ctx, domain, it, it.rule.peer); err != nil {
		return err
	}
	if it.rule.overMarked() {
		it.d.Remaining = max(0, it.d.Remaining-1)
	}
	return nil
}

// peek reads every counter of r without charging, and when one of
// them would be over after its hits, leaves only those to charge (cost 0
// for the others), as envoyproxy/ratelimit does with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
func (p *peerCounter) peek(ctx context.Context, r *request) error {
	var buf [MaxDescriptors]bool
	near := buf[:0]
	if len(r.items) > len(buf) {
		near = make([]bool, 0, len(r.items))
	}
	near = near[:len(r.items)]
	anyNear := false
	for i := range r.items {
		it := &r.items[i]
		if it.result != 0 || it.refund {
			continue
		}
		d, err := p.charge(ctx, &r.res, it, it.rule.peer, 0)
		if err != nil {
			return storeError(ctx, p.adj.logs, r.req.Domain, err)
		}
		left := uint64(max(0, d.Remaining))
		it.peek = uint64(it.rule.peer.Capacity()) - min(left, uint64(it.rule.peer.Capacity()))
		if it.rule.overMarked() {
			near[i] = it.cost >= left // m + h > L, where Remaining is L+1-m
		} else {
			near[i] = left < it.cost || it.cost == 0 && !d.Allowed
		}
		anyNear = anyNear || near[i]
	}
	if !anyNear {
		return nil
	}
	for i := range r.items {
		r.items[i].held = !near[i]
	}
	return nil
}

// maxFill bounds the attempts to mark a counter over while other requests
// keep charging it; each attempt finds less room, and a counter left short
// of the mark is only closer to it.
const maxFill = 4

// take charges one item under its peer limit (charge) and reports its
// decision, with Remaining as envoyproxy/ratelimit reports it, and whether
// it is over. Under an over-marked limit a refused charge still counts:
// the counter is filled to its over mark; and it.before is set to the
// count before the charge (at most the mark).
func (p *peerCounter) take(ctx context.Context, res *decide.Result, it *item) (d sluice.Decision, over bool, err error) {
	lim, h := it.rule.peer, it.cost
	if it.held {
		h = 0
	}
	capacity := uint64(lim.Capacity())
	cost := int64(min(h, capacity))
	if h > capacity {
		cost = 0 // more than it can ever hold: over, and marked below
	}
	if d, err = p.charge(ctx, res, it, lim, cost); err != nil {
		return d, false, err
	}
	refused := !d.Allowed || h > capacity
	if !it.rule.overMarked() {
		if refused && h > 0 { // counted all the same, into a bounded debt, as under all-or-nothing
			_, _ = p.dc.Adjust(ctx, &decide.Check{Name: it.rule.path, Key: it.key, Limit: lim}, signed(h))
		}
		return d, refused, nil
	}
	room := uint64(max(0, d.Remaining))
	if d.Allowed {
		room += uint64(cost)
	}
	filled := uint64(0)
	for n := 0; refused && h > 0 && d.Remaining > 0 && n < maxFill; n++ {
		var f sluice.Decision
		if f, err = p.charge(ctx, res, it, lim, d.Remaining); err != nil {
			return d, false, err
		}
		if f.Allowed {
			filled += uint64(d.Remaining)
		}
		d.Remaining, d.ResetAfter = f.Remaining, max(d.ResetAfter, f.ResetAfter)
	}
	if refused && h > 0 { // the fills measured the room: a refusal the near cache answered may be stale
		room = filled + uint64(max(0, d.Remaining))
	}
	it.counts, it.before = true, capacity-min(room, capacity)
	over = refused || d.Remaining == 0
	d.Remaining = max(0, d.Remaining-1)
	return d, over, nil
}

// charge charges cost to one item's counter under lim through the decision
// path every front-end shares (decide.Decider.Run, with res reused), and
// returns its decision, or the error of a check the store could not
// decide.
func (p *peerCounter) charge(ctx context.Context, res *decide.Result, it *item, lim sluice.Limit, cost int64) (sluice.Decision, error) {
	check := [1]decide.Check{{Name: it.rule.path, Key: it.key, Limit: lim, Cost: cost}}
	p.dc.Run(ctx, check[:], res)
	switch res.Outcome {
	case decide.Failed, decide.Invalid:
		return sluice.Decision{}, res.Err
	}
	return res.Each[0], nil
}

// peerCounts sets the counts envoyproxy/ratelimit computes item i's
// statistics from: before and after its hits. A held descriptor was not
// charged: there after is the count as read before the request (exact: it
// was not near the limit) plus what earlier descriptors of the request
// charged to the same counter, and before is after - hits, wrapping as
// there. Otherwise before is the count the store had (at most the over
// mark, which stands for any count past the limit: every hit is then over
// either way) and after is before + hits.
func (r *request) peerCounts(i int) {
	it := &r.items[i]
	if !it.counts {
		return
	}
	if !it.held {
		it.after = satAdd(it.before, it.cost)
		return
	}
	it.after = it.peek
	for j := range r.items[:i] {
		if o := &r.items[j]; o.counts && !o.held && o.key == it.key && o.rule.peer == it.rule.peer {
			it.after = satAdd(it.after, o.cost)
		}
	}
	it.before = it.after - it.cost
}

func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}

// nearLimitRatio is envoyproxy/ratelimit's NEAR_LIMIT_RATIO default.
const nearLimitRatio = float32(0.8)

// peerStats splits the hits that took a counter from before to after,
// under a limit of l, as envoyproxy/ratelimit's base limiter counts its
// within_limit, near_limit and over_limit statistics.
func peerStats(l, before, after, hits uint64) (within, near, over uint64) {
	nearT := uint64(math.Floor(float64(float32(l) * nearLimitRatio)))
	h := hits
	if after > l {
		if before >= l {
			return 0, 0, h
		}
		return 0, l - max(nearT, before), after - l
	}
	if after > nearT {
		near = after - nearT
		if before >= nearT {
			near = h
		}
	}
	return h, near, 0
}

// peerCounting reports whether dom is counted under CountPeer.
func (s *Service) peerCounting(dom *domain) bool {
	if dom.counting != 0 {
		return dom.counting == CountPeer
	}
	return s.opts.Counting == CountPeer
}
