package redisstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// LeaseConfig turns on quota leases: an instance takes a few tokens (or
// window counts) of a hot limit from Redis in one script call, the lease,
// and admits requests from it locally, without a round trip, until it is
// spent; what is left unspent goes back to Redis when the lease ends.
//
// Every admission spends a unit that Redis counted when it handed it out
// (scripts/lease.lua charges the lease exactly as a request of that cost),
// so a fleet with leases never admits more than the limit's bound: over
// the life of a limit, admitted ≤ what Redis handed out ≤ the bound.
// What leases cost is capacity and timing, never excess:
//
//   - Capacity held by an instance is not available to the others until it
//     is spent or given back; at any moment, at most one lease per instance
//     and key, each at most Capacity/Share units (plus less than one
//     request's cost, when a caller whose deadline ended leaves its grant
//     to the lease), counting a lease call in flight. An instance that dies
//     loses what it held and what it was being granted: no more than that
//     per key.
//   - A unit may be admitted until Hold after the instance's latest lease
//     call for its key (a fixed_window unit never after its window ends),
//     so over a stretch of time shorter than the limit's period the fleet
//     may admit, beyond the limit's bound for that stretch, what was
//     outstanding when it began: at most instances × Capacity/Share.
//
// The lease size follows the instance's own traffic under that limit: the
// cost it asked for in the last Traffic, at least the request's cost, at
// most Capacity/Share. A quiet key (one request per Traffic) takes exactly
// its cost and holds nothing, a decision per call as without leases. A
// key whose traffic has just begun (nothing asked in the previous Traffic)
// and has seen more than one request asks for what they come to over a
// Traffic at their rate (measured over at least Traffic/16), so that it
// reaches its lease size in its second call instead of growing by a
// request or so per call, each a round trip for its requests. When
// a lease runs below half of that, a background call asks for as much
// again (never for more than Capacity/Share with what is held), so that
// requests seldom wait for Redis: the call has half a lease's traffic to
// return before the units run out. A token_bucket or gcra lease
// call that cannot get half of what it asks is refused, with the time
// until all of it fits: an instance short of units then answers its
// requests from the near cache until a lease is worth a call, rather than
// taking units one call at a time as they refill (such a refusal may
// report Remaining ≥ the cost).
//
// Costs: no round trip for a request its lease covers (a few small
// allocations and a lock per key); one script call (scripts/lease.lua) per
// lease, through the same workers and pipelines as every call.
// Store.LeaseStats reports what the leases saved and hold.
//
// Only fixed_window, token_bucket and gcra lease. The other algorithms
// keep one script call per decision: a sliding log records every request
// at its own time and concurrency every lease (neither can be handed out
// ahead), the sliding window weighs counts by when they were made, the
// leaky bucket's delay depends on the queue at the moment of the request
// and warm-up's interval on when the previous one left. A check (TakeAll)
// with any of them, or whose keys span Redis Cluster slots (see Config.Slots),
// is decided without leases. Peeks (cost 0) always ask Redis.
//
// The zero value is off; each field documents its default.
type LeaseConfig struct {
	// Enabled turns leases on for every limit that can lease.
	Enabled bool

	// Traffic is how much of the instance's own traffic under a limit a
	// lease covers. Default 50ms.
	Traffic time.Duration

	// Share caps a lease at Capacity/Share units (at least 1). Default 16.
	Share int64

	// Hold is how long unspent units of a lease are held before they are
	// given back (one script call). Default 250ms. With Config.Now (tests)
	// they are given back by the next decision of their key that finds
	// them expired, not by a background sweep.
	Hold time.Duration

	// Keys bounds how many keys hold a lease at once; past it, other keys
	// are decided without leases until idle ones are dropped. Default
	// 10,000.
	Keys int
}

func (c LeaseConfig) withDefaults() LeaseConfig {
	if c.Traffic <= 0 {
		c.Traffic = 50 * time.Millisecond
	}
	if c.Share <= 0 {
		c.Share = 16
	}
	if c.Hold <= 0 {
		c.Hold = 250 * time.Millisecond
	}
	if c.Keys <= 0 {
		c.Keys = 10_000
	}
	return c
}

// leasable reports whether a limit's room can be handed out ahead of use.
func leasable(alg sluice.Algorithm) bool {
	d := algo.Of(alg)
	return d != nil && d.QuotaLeases
}

// leaser holds the leases of one Store: one per (key, limit) in use, at
// most cfg.Keys.
type leaser struct {
	s   *Store
	cfg LeaseConfig

	mu     sync.RWMutex
	byKey  map[string]*lease // by state key
	closed bool

	stop    chan struct{}
	swept   chan struct{}
	returns inflight // give-backs and prefetches in flight

	n leaseCounts // what LeaseStats reports
	// granted, if set (by tests, before any traffic), is called by add
	// with e.mu held once a grant's units are in e
	granted func(e *lease)
}

// lease is what one instance holds of one (key, limit).
type lease struct {
	mu      sync.Mutex
	q       request   // the limit and keys, for giving back
	tokens  int64     // units held, unspent
	start   int64     // fixed_window: the window (µs, Redis time) they belong to
	expires time.Time // when unspent units are given back
	end     time.Time // fixed_window: when their window ends (local clock)
	resetAt time.Time // when Redis said the limit is full again
	room    int64     // what Redis had left at the last grant
	// refill is closed when the lease call in flight for this key, if
	// any, returns; callers short of units wait for it.
	refill chan struct{}
	quiet  time.Time // no prefetch before then (Redis refused or failed one)
	// the cost asked in the current and previous Traffic windows
	win       time.Time
	cur, prev int64
	last      time.Time
}

func newLeaser(s *Store, cfg LeaseConfig) *leaser {
	l := &leaser{s: s, cfg: cfg.withDefaults(), byKey: map[string]*lease{},
		stop: make(chan struct{}), swept: make(chan struct{})}
	if s.now == nil {
		go l.sweeper()
	} else {
		// a test clock (Config.Now): a ticker of the real clock would
		// sweep at random moments of the test's timeline; decisions
		// still give back the units of the leases they find expired
		close(l.swept)
	}
	return l
}

// leases puts in ls the lease of every request, made if need be, and
// reports whether it could: false when the check cannot lease (an
// algorithm that cannot, a peek, keys on several Cluster slots, or no room
// for another key).
func (l *leaser) leases(qs []request, ls []*lease) bool {
	for _, q := range qs {
		if !leasable(q.p.Alg) || q.Cost == 0 {
			return false
		}
	}
	if len(qs) > 1 && len(l.s.groups(qs)) > 1 {
		return false
	}
	for i, q := range qs {
		if ls[i] = l.find(q); ls[i] == nil {
			return false
		}
	}
	return true
}

// find returns q's lease, made if there is room, or nil.
func (l *leaser) find(q request) *lease {
	l.mu.RLock()
	e, closed := l.byKey[q.state], l.closed
	l.mu.RUnlock()
	if e != nil || closed {
		return e
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e = l.byKey[q.state]; e == nil && !l.closed && len(l.byKey) < l.cfg.Keys {
		e = &lease{q: q}
		e.q.Cost, e.q.MaxDelay = 0, 0
		l.byKey[q.state] = e
	}
	return e
}

// forget drops the lease of state, if any, and what it holds (Store.Reset
// deleted the state that counted it).
func (l *leaser) forget(state string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	e := l.byKey[state]
	delete(l.byKey, state)
	l.mu.Unlock()
	if e != nil {
		e.mu.Lock()
		l.n.expired.Add(e.tokens)
		e.tokens = 0
		e.mu.Unlock()
	}
}

// note counts cost asked at now in the demand windows.
func (e *lease) note(cost int64, now time.Time, traffic time.Duration) {
	if d := now.Sub(e.win); d >= traffic || d < 0 {
		e.prev = e.cur
		if d >= 2*traffic || d < 0 {
			e.prev = 0
		}
		e.cur, e.win = 0, now
	}
	e.cur += cost
	e.last = now
}

// want is the lease to ask for when need more units are needed: the
// demand of the last Traffic, within [need, cap/share] (need may be more).
// When traffic has just begun (no demand in the previous Traffic) and the
// current window has seen more than one request, the demand is what they
// would come to over a whole Traffic at their rate, counted over at least
// a sixteenth of it (so at most 16 times what was seen): a key that turns
// hot after a pause reaches the lease its rate needs in one call, where a
// lease of what was seen so far grew by a request or so per call, each a
// round trip its requests waited for.
func (e *lease) want(need int64, share int64, traffic time.Duration) int64 {
	d := max(e.prev, e.cur)
	if e.prev == 0 && e.cur > 1 {
		elapsed := max(e.last.Sub(e.win), traffic/16)
		d = int64(min(float64(e.cur)*float64(traffic)/float64(elapsed), math.MaxInt64/2))
	}
	w := min(d, max(1, e.q.p.Cap/share))
	return max(w, need)
}

// expire gives back (or, once their window is over, drops) the units held
// past their time. Called with e.mu held.
func (e *lease) expire(now time.Time, l *leaser) {
	if e.tokens == 0 || now.Before(e.expires) {
		return
	}
	n := e.tokens
	e.tokens = 0
	if e.q.p.Desc().Aligned && !now.Before(e.end) {
		l.n.expired.Add(n)
		return // the window they belong to is over: nothing to give back
	}
	l.giveBack(e.q, n, e.start)
}

// decision is the answer to a request admitted from the lease at now:
// Remaining counts what it holds and what Redis had left at its last grant.
func (e *lease) decision(now time.Time) sluice.Decision {
	return sluice.Decision{Allowed: true, Limit: e.q.p.Cap, Remaining: min(e.q.p.Cap, e.tokens+e.room),
		ResetAfter: max(0, e.resetAt.Sub(now))}
}

// giveBack returns n unspent units of q's limit to Redis (scripts/refund.lua,
// which subtracts them from the state as the refund of a charge), in the
// background. If Redis cannot be reached they are lost: capacity, never
// excess.
func (l *leaser) giveBack(q request, n, start int64) {
	q.Cost = n
	c := l.s.call(scripts().refund, []request{q}, []string{"||" + strconv.FormatInt(start, 10)})
	l.returns.add()
	go func() {
		defer l.returns.done()
		// no deadline of its own: one that ended while the call was in
		// flight would not unsend it (the client's timeouts bound it); a
		// unit not given back is capacity lost, within the documented bound
		_, err := l.s.run(context.Background(), c)
		l.n.gaveBack(n, err)
	}()
}

// take decides qs from their leases, asking Redis for new ones where they
// fall short, all-or-nothing; now is the caller's reading of localNow, so
// that a request its lease covers reads the clock once. ok is false when
// the check cannot lease: the caller then decides it without leases.
func (l *leaser) take(ctx context.Context, qs []request, ds []sluice.Decision, now time.Time) (ok bool, err error) {
	if l == nil {
		return false, nil
	}
	ls := make([]*lease, len(qs)) // on the stack when small
	if !l.leases(qs, ls) {
		return false, nil
	}
	for {
		wait := l.rebase(ctx, ls, qs, now)
		if wait == nil {
			break
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return true, ctx.Err()
		}
		now = l.s.localNow()
	}
	spent := make([]bool, len(qs))
	waited := false
	for first := true; ; first = false {
		if !first {
			now = l.s.localNow()
			if l.s.nearRefusal(qs, ds, now) { // a lease call this check waited for was refused
				return true, nil
			}
		}
		miss, wait := l.spend(ls, qs, ds, spent, now, first)
		if len(miss) == 0 && wait == nil {
			l.n.local.Add(1)
			return true, nil
		}
		if wait == nil {
			wait = l.claim(ls, miss)
		}
		if wait != nil {
			l.unspend(ls, qs, spent)
			if !waited {
				l.n.waits.Add(1)
				waited = true
			}
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return true, ctx.Err()
			}
		}
		return true, l.refill(ctx, ls, qs, ds, spent, miss, now)
	}
}

// rebase brings each lease to its request's limit. A lease taken under
// another limit of the key's identity (a reload changed it: the state key
// is the same) gives its unspent units back under the limit they were
// taken under, in this call, before any lease call under the new one, so
// that the state Redis carries over to the new limit holds what was
// admitted, as without leases; the lease then starts empty under the new
// limit. A calendar window's argument follows its period. It returns a
// lease call in flight to wait for first.
func (l *leaser) rebase(ctx context.Context, ls []*lease, qs []request, now time.Time) (wait chan struct{}) {
	for i, e := range ls {
		q := qs[i]
		e.mu.Lock()
		switch {
		case e.q.Limit == q.Limit:
			e.q.params = q.params // the same string but for a calendar's bounds
			e.mu.Unlock()
			continue
		case e.refill != nil:
			e.mu.Unlock()
			return e.refill
		}
		old, n, start := e.q, e.tokens, e.start
		if old.p.Desc().Aligned && !now.Before(e.end) {
			l.n.expired.Add(n)
			n = 0 // their window is over: nothing to give back
		}
		e.q, e.tokens, e.start, e.room, e.end, e.resetAt = q, 0, 0, 0, time.Time{}, time.Time{}
		e.q.Cost, e.q.MaxDelay = 0, 0
		if n == 0 {
			e.mu.Unlock()
			continue
		}
		ch := make(chan struct{})
		e.refill = ch // calls under the new limit wait for the give-back
		e.mu.Unlock()
		old.Cost = n
		// a give-back that fails loses the units: capacity, never excess
		_, err := l.s.run(ctx, l.s.call(scripts().refund, []request{old}, []string{"||" + strconv.FormatInt(start, 10)}))
		l.n.gaveBack(n, err)
		release(ls[i:i+1], []int{0})
	}
	return nil
}

// spend admits from the leases each request they cover, marking it in
// spent; it returns the requests they do not cover, or a lease call in
// flight to wait for. first counts the check in each lease's demand.
func (l *leaser) spend(ls []*lease, qs []request, ds []sluice.Decision, spent []bool, now time.Time, first bool) (miss []int, wait chan struct{}) {
	for i, e := range ls {
		c := qs[i].Cost
		e.mu.Lock()
		e.expire(now, l)
		if first {
			e.note(c, now, l.cfg.Traffic)
		}
		switch {
		case l.spendFrom(e, c, &ds[i], now):
			spent[i] = true
		case e.refill != nil:
			wait = e.refill
		default:
			miss = append(miss, i)
		}
		e.mu.Unlock()
	}
	return miss, wait
}

// spendFrom admits cost c from e, whose lock is held, if e holds it,
// writing the decision into d; a lease running low starts its refill in
// the background.
func (l *leaser) spendFrom(e *lease, c int64, d *sluice.Decision, now time.Time) bool {
	if e.tokens < c {
		return false
	}
	e.tokens -= c
	l.n.spent.Add(c)
	*d = e.decision(now)
	l.prefetch(e, now)
	return true
}

// takeHeld decides qs all-or-nothing from the leases this instance
// already holds for them under their own limits, without waiting and
// without a call to Redis (a refill may start in the background, as on
// every spend), writing the decisions into ds, and reports whether it did.
// It spends across Cluster slots too: each unit was counted by Redis when
// its lease was handed out. When it did not decide, nothing was charged,
// and nothing noted but, rarely, the demand of a check whose later request
// missed: take decides them and notes their demand.
func (l *leaser) takeHeld(qs []request, ds []sluice.Decision, now time.Time) bool {
	if l == nil {
		return false
	}
	for _, q := range qs {
		if !leasable(q.p.Alg) || q.Cost == 0 {
			return false
		}
	}
	ls := make([]*lease, len(qs)) // on the stack when small
	l.mu.RLock()
	for i, q := range qs {
		if ls[i] = l.byKey[q.state]; ls[i] == nil {
			l.mu.RUnlock()
			return false
		}
	}
	l.mu.RUnlock()
	spent := make([]bool, len(qs))
	for i, e := range ls {
		if !l.spendHeld(e, &qs[i], &ds[i], now) {
			l.unspend(ls, qs, spent)
			return false
		}
		spent[i] = true
	}
	l.n.local.Add(1)
	return true
}

// takeHeldAt is takeHeld for one request whose state key is state, given
// as bytes: the lease is looked up without building the string.
func (l *leaser) takeHeldAt(state []byte, q *request, d *sluice.Decision, now time.Time) bool {
	if l == nil {
		return false
	}
	l.mu.RLock()
	e := l.byKey[string(state)]
	l.mu.RUnlock()
	if e == nil || !l.spendHeld(e, q, d, now) {
		return false
	}
	l.n.local.Add(1)
	return true
}

// spendHeld admits q from e if e holds its cost under q's own limit (a
// lease held under the key's previous limit is rebased by take, not spent
// here), noting q's demand only then.
func (l *leaser) spendHeld(e *lease, q *request, d *sluice.Decision, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.q.Limit != q.Limit {
		return false
	}
	e.q.params = q.params // as rebase does: a calendar's bounds move
	e.expire(now, l)
	if e.tokens < q.Cost {
		return false
	}
	e.note(q.Cost, now, l.cfg.Traffic)
	return l.spendFrom(e, q.Cost, d, now)
}

// unspend gives the units spent for a check that is not admitted back to
// their leases.
func (l *leaser) unspend(ls []*lease, qs []request, spent []bool) {
	for i, e := range ls {
		if spent[i] {
			e.mu.Lock()
			e.tokens += qs[i].Cost
			e.mu.Unlock()
			l.n.spent.Add(-qs[i].Cost)
			spent[i] = false
		}
	}
}

// claim marks a lease call in flight for each lease of miss, or, if one
// has a call in flight already, claims none and returns that call to wait
// for. Units a lease still holds stay there for other requests: the call
// asks for the whole cost.
func (l *leaser) claim(ls []*lease, miss []int) (wait chan struct{}) {
	ch := make(chan struct{})
	for k, i := range miss {
		e := ls[i]
		e.mu.Lock()
		if e.refill != nil {
			wait = e.refill
			e.mu.Unlock()
			for _, j := range miss[:k] { // unclaimed; who waits on ch retries
				ls[j].mu.Lock()
				ls[j].refill = nil
				ls[j].mu.Unlock()
			}
			close(ch)
			return wait
		}
		e.refill = ch
		e.mu.Unlock()
	}
	return nil
}

// release ends the claims of miss and wakes their waiters.
func release(ls []*lease, miss []int) {
	var ch chan struct{}
	for _, i := range miss {
		e := ls[i]
		e.mu.Lock()
		ch, e.refill = e.refill, nil
		e.mu.Unlock()
	}
	if ch != nil {
		close(ch)
	}
}

// prefetch starts, in the background, a lease call for e when what it
// holds has fallen below half of what it wants, for what it wants again
// (at most Capacity/Share with what it holds), so that requests seldom
// wait for a round trip. Called with e.mu held.
func (l *leaser) prefetch(e *lease, now time.Time) {
	w := e.want(1, l.cfg.Share, l.cfg.Traffic)
	if e.refill != nil || e.tokens*2 >= w || now.Before(e.quiet) {
		return
	}
	q := e.q
	ask := min(w, max(1, q.p.Cap/l.cfg.Share)-e.tokens)
	q.Cost, q.lease = 1, strconv.FormatInt(ask, 10)
	if !q.p.Desc().Aligned {
		q.Cost = max(1, ask/2) // as least does
	}
	ch := make(chan struct{})
	e.refill = ch
	l.returns.add()
	go l.prefetched(e, q, now, ch)
}

// prefetched makes the lease call prefetch started, sent at now.
func (l *leaser) prefetched(e *lease, q request, sent time.Time, ch chan struct{}) {
	defer l.returns.done()
	// no deadline of its own: a lease granted after it ended would be
	// lost (the client's timeouts bound the call)
	reply, err := l.s.run(context.Background(), l.s.call(scripts().lease, []request{q}, nil))
	var gs []grant
	if err == nil {
		gs, err = decodeLease(reply, 1)
	}
	l.n.answered(gs, err)
	if err == nil && gs[0].d.Allowed {
		l.add(e, gs[0], 0, sent)
	}
	e.mu.Lock()
	switch {
	case err != nil:
		e.quiet = sent.Add(l.cfg.Hold) // Redis is failing: the decisions will tell
	case !gs[0].d.Allowed:
		e.quiet = sent.Add(gs[0].d.RetryAfter)
	}
	e.refill = nil
	e.mu.Unlock()
	close(ch)
}

// grant is a lease call's answer for one request.
type grant struct {
	d       sluice.Decision
	granted int64
	start   int64 // fixed_window: the window it belongs to
}

// refill asks Redis, in one script call, for a lease for each request of
// miss (claimed), sent at now, and decides the check with them: admitted
// with the units spent, or refused with nothing charged anywhere.
func (l *leaser) refill(ctx context.Context, ls []*lease, qs []request, ds []sluice.Decision, spent []bool, miss []int, now time.Time) error {
	rs := make([]request, len(miss))
	for k, i := range miss {
		e := ls[i]
		e.mu.Lock()
		w := e.want(qs[i].Cost, l.cfg.Share, l.cfg.Traffic)
		e.mu.Unlock()
		rs[k] = qs[i]
		rs[k].Cost, rs[k].lease = least(qs[i], w), strconv.FormatInt(w, 10)
	}
	c := l.s.call(scripts().lease, rs, nil)
	c.part = true // run by a worker, so that its outcome is known if ctx ends
	err := l.s.batch.submit(ctx, c)
	if err == nil {
		select {
		case <-c.done:
			err = c.err
		case <-ctx.Done():
			l.unspend(ls, qs, spent)
			l.returns.add()
			// copies: ls may live on the caller's stack
			go l.orphaned(slices.Clone(ls), miss, c, now)
			return l.s.wrap(ctx.Err(), "lease", rs[0])
		}
	}
	var gs []grant
	if err == nil {
		gs, err = decodeLease(c.reply, len(rs))
	}
	l.n.answered(gs, err)
	if err != nil {
		release(ls, miss)
		l.unspend(ls, qs, spent)
		return l.s.wrap(err, "lease", rs[0])
	}
	if !gs[0].d.Allowed {
		l.refused(ls, qs, ds, spent, miss, gs)
		return nil
	}
	for k, i := range miss {
		l.add(ls[i], gs[k], qs[i].Cost, now)
		ls[i].mu.Lock()
		ds[i] = ls[i].decision(now)
		ls[i].mu.Unlock()
	}
	release(ls, miss)
	return nil
}

// least is the smallest lease worth a call for q when w is wanted. A
// bucket's is half of w: refused, an instance asks again when w has
// refilled (lease.lua's retry), so instances short of units do not take
// the few that trickle in one call each. A fixed window's is q's cost:
// room left near the end of a window would be lost if it waited.
func least(q request, w int64) int64 {
	if q.p.Desc().Aligned {
		return q.Cost
	}
	return max(q.Cost, w/2)
}

// orphaned keeps what a lease call whose caller left (its context ended)
// was granted: the units go to the leases, unspent, so that a deadline
// shorter than Redis's answer loses no capacity.
func (l *leaser) orphaned(ls []*lease, miss []int, c *call, sent time.Time) {
	defer l.returns.done()
	<-c.done
	var gs []grant
	err := c.err
	if err == nil {
		gs, err = decodeLease(c.reply, len(miss))
	}
	l.n.answered(gs, err)
	if err == nil && gs[0].d.Allowed {
		for k, i := range miss {
			l.add(ls[i], gs[k], 0, sent)
		}
	}
	release(ls, miss)
}

// add puts the units of g, less cost (spent at once), in the lease e,
// which asked for them at sent.
func (l *leaser) add(e *lease, g grant, cost int64, sent time.Time) {
	l.n.spent.Add(cost)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.q.p.Desc().Aligned && g.start != e.start {
		l.n.expired.Add(e.tokens)
		e.tokens = 0 // of a window that is over
	}
	e.tokens += g.granted - cost
	if l.granted != nil {
		l.granted(e)
	}
	e.expires, e.start = sent.Add(l.cfg.Hold), g.start
	// Redis decided at or after sent: its window ends, and its bucket is
	// full, no sooner than this
	e.end = sent.Add(g.d.ResetAfter)
	e.resetAt, e.room = e.end, g.d.Remaining
}

// refused answers a check a lease call refused: the requests it refused
// with their decisions (remembered by the near cache, for the checks
// waiting on this call), the others refused with what they hold once the
// units spent for them are back in their leases.
func (l *leaser) refused(ls []*lease, qs []request, ds []sluice.Decision, spent []bool, miss []int, gs []grant) {
	l.unspend(ls, qs, spent)
	for i, e := range ls {
		if !contains(miss, i) {
			e.mu.Lock()
			ds[i] = sluice.Decision{Limit: e.q.p.Cap, Remaining: e.tokens}
			e.mu.Unlock()
		}
	}
	for k, i := range miss {
		ds[i] = gs[k].d
		l.s.remember(qs[i], ds[i])
	}
	release(ls, miss)
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// decodeLease reads lease.lua's reply: 8 integers per request.
func decodeLease(reply []any, n int) ([]grant, error) {
	if len(reply) != 8*n {
		return nil, fmt.Errorf("%w: %d values for %d lease requests", errBadReply, len(reply), n)
	}
	gs := make([]grant, n)
	for k := range gs {
		var v [8]int64
		for j := range v {
			x, ok := reply[8*k+j].(int64)
			if !ok {
				return nil, fmt.Errorf("%w: value %d is %T, want an integer", errBadReply, 8*k+j, reply[8*k+j])
			}
			v[j] = x
		}
		gs[k] = grant{
			d: sluice.Decision{Allowed: v[0] == 1, Limit: v[1], Remaining: v[2],
				RetryAfter: time.Duration(v[3]) * time.Microsecond, ResetAfter: time.Duration(v[4]) * time.Microsecond},
			granted: v[6], start: v[7],
		}
	}
	return gs, nil
}

// sweeper gives back, every Hold, the units held past their time, and
// drops the leases of keys idle for two Holds, until close.
func (l *leaser) sweeper() {
	defer close(l.swept)
	t := time.NewTicker(l.cfg.Hold)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.sweep(l.s.localNow())
		}
	}
}

func (l *leaser) sweep(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for key, e := range l.byKey {
		e.mu.Lock()
		e.expire(now, l)
		idle := e.tokens == 0 && e.refill == nil && now.Sub(e.last) > 2*l.cfg.Hold
		e.mu.Unlock()
		if idle {
			delete(l.byKey, key)
		}
	}
}

// close stops the sweeper and gives back every unit held, waiting until
// Redis has them (or the client's timeouts give up).
func (l *leaser) close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	close(l.stop)
	l.mu.Unlock()
	<-l.swept
	l.returns.wait() // prefetches in flight add to what is held
	l.mu.Lock()
	for _, e := range l.byKey {
		e.mu.Lock()
		if e.tokens > 0 {
			e.expires = time.Time{}
			e.expire(l.s.localNow(), l)
		}
		e.mu.Unlock()
	}
	l.mu.Unlock()
	l.returns.wait()
}

// inflight counts background calls; unlike a sync.WaitGroup, it may be
// waited for while calls are being added.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n falls to 0
}

func (f *inflight) add() {
	f.mu.Lock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
	f.mu.Unlock()
}

func (f *inflight) done() {
	f.mu.Lock()
	if f.n--; f.n == 0 {
		close(f.idle)
	}
	f.mu.Unlock()
}

// wait returns once no call is in flight (calls added meanwhile too).
func (f *inflight) wait() {
	for {
		f.mu.Lock()
		ch, n := f.idle, f.n
		f.mu.Unlock()
		if n == 0 {
			return
		}
		<-ch
	}
}
