package rls

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"go.yaml.in/yaml/v3"
)

// Counting says how the limits of one request are charged.
type Counting uint8

const (
	// CountAllOrNothing charges the enforced limits of a request in one
	// sluice Check: if any refuses, none is charged, and a refused request
	// is not counted. sluice's default.
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
func (l *loader) domainOptions(n *yaml.Node, w where) Counting {
	f := l.Fields(n, w, "sluice", "counting")
	v := f["counting"]
	if v == nil {
		return 0
	}
	s, ok := l.Str(v, w, "sluice.counting")
	if !ok {
		return 0
	}
	c, err := ParseCounting(s)
	if err != nil {
		l.Fail(v, w, "sluice.counting", "unknown counting %q (want all-or-nothing or peer)", s)
	}
	return c
}

// peerLimit is the limit a rule is counted under in CountPeer: for
// envoyproxy/ratelimit's fixed window (and requests_per_unit 0), a fixed
// window one larger, whose last unit marks "over". The peer's counter n
// goes past the limit L; sluice's count m stays at min(n, L+1), which
// answers alike: over when m > L, remaining L-m otherwise. A rule with
// another algorithm (a sluice block) is counted under its own limit,
// each descriptor on its own, refused requests not counted.
func peerLimit(lim sluice.Limit, rpu uint32, period time.Duration) sluice.Limit {
	if rpu == 0 || lim.Algorithm == sluice.AlgorithmFixedWindow {
		return sluice.FixedWindow(int64(rpu)+1, period)
	}
	return lim
}

// overMarked reports whether r is counted with the extra "over" unit of
// peerLimit.
func (r *rule) overMarked() bool {
	return r.peer.Algorithm == sluice.AlgorithmFixedWindow && r.peer != r.limit
}

// runPeer decides a request under CountPeer: each descriptor with a limit
// is charged on its own, in request order, so that a descriptor that
// appears twice is counted twice and the second sees the first's hits.
// With Options.StopIncrementWhenOverLimit (envoyproxy/ratelimit's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT), the counters are read first,
// and if any descriptor would be over, only those that would be over are
// charged.
func (s *Service) runPeer(ctx context.Context, r *request) error {
	for i := range r.items {
		if it := &r.items[i]; it.result == 0 {
			it.key = key(r.req.Domain, r.req.Descriptors[i].Entries, it.shared)
		}
	}
	if s.opts.StopIncrementWhenOverLimit {
		if err := s.peekPeer(ctx, r); err != nil {
			return err
		}
	}
	for i := range r.items {
		it := &r.items[i]
		if it.result != 0 {
			continue
		}
		d, over, err := s.takePeer(ctx, it)
		if err != nil {
			return s.storeError(ctx, r.req.Domain, err)
		}
		it.d, it.over = d, over
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

// peekPeer reads every counter of r without charging, and when one of
// them would be over after its hits, leaves only those to charge (cost 0
// for the others), as envoyproxy/ratelimit does with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
func (s *Service) peekPeer(ctx context.Context, r *request) error {
	var near [MaxDescriptors]bool
	anyNear := false
	for i := range r.items {
		it := &r.items[i]
		if it.result != 0 {
			continue
		}
		d, err := s.limiter.AllowN(ctx, it.key, it.rule.peer, 0)
		if err != nil {
			return s.storeError(ctx, r.req.Domain, err)
		}
		left := uint64(max(0, d.Remaining))
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
		if !near[i] {
			r.items[i].cost = 0
		}
	}
	return nil
}

// maxFill bounds the attempts to mark a counter over while other requests
// keep charging it; each attempt finds less room, and a counter left short
// of the mark is only closer to it.
const maxFill = 4

// takePeer charges one item under its peer limit and reports its
// decision, with Remaining as envoyproxy/ratelimit reports it, and whether
// it is over. Under an over-marked limit a refused charge still counts:
// the counter is filled to its over mark.
func (s *Service) takePeer(ctx context.Context, it *item) (d sluice.Decision, over bool, err error) {
	lim, h := it.rule.peer, it.cost
	capacity := uint64(lim.Capacity())
	cost := int64(min(h, capacity))
	if h > capacity {
		cost = 0 // more than it can ever hold: over, and marked below
	}
	if d, err = s.limiter.AllowN(ctx, it.key, lim, cost); err != nil {
		return d, false, err
	}
	refused := !d.Allowed || h > capacity
	if !it.rule.overMarked() {
		return d, refused, nil
	}
	for n := 0; refused && h > 0 && d.Remaining > 0 && n < maxFill; n++ {
		var f sluice.Decision
		if f, err = s.limiter.AllowN(ctx, it.key, lim, d.Remaining); err != nil {
			return d, false, err
		}
		d.Remaining, d.ResetAfter = f.Remaining, max(d.ResetAfter, f.ResetAfter)
	}
	over = refused || d.Remaining == 0
	d.Remaining = max(0, d.Remaining-1)
	return d, over, nil
}

// peerCounting reports whether dom is counted under CountPeer.
func (s *Service) peerCounting(dom *domain) bool {
	if dom.counting != 0 {
		return dom.counting == CountPeer
	}
	return s.opts.Counting == CountPeer
}
