package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// Prepared is one decision prepared for Redis: its requests checked, their
// limits compiled, their keys named. TakeLocal and TakeAllLocal leave in it
// what they could not decide in the process, so that the call to Redis
// that follows (Prepared.Take, Prepared.TakeAll) prepares nothing again:
// package failover asks what the instance holds outside its breaker and
// deadline, then calls Redis within them, and a decision is prepared once
// either way. The zero value holds nothing. A Prepared serves one
// decision, on one goroutine; it is a value the caller keeps on its stack.
type Prepared struct {
	s     *Store
	q     request   // a lone request's (TakeLocal)
	qs    []request // a check's (TakeAllLocal)
	check bool      // prepared by TakeAllLocal
	ready bool      // left for Redis (or err set): Take or TakeAll may go on
	now   time.Time // the decision's one reading of localNow
	err   error     // what preparing found wrong: Take or TakeAll returns it
	asked bool      // the near cache has been asked
}

var errNotPrepared = errors.New("redisstore: nothing prepared for this call (TakeLocal prepares for Take, TakeAllLocal for TakeAll, when they did not decide)")

// Take decides one request in one round trip, or none when the near cache
// knows the key is refused or a quota lease covers it (Config.Leases). If
// ctx ends while the script is in flight, Take returns ctx's error, and
// the request may have been charged.
func (s *Store) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	var q request
	var buf [128]byte
	var d sluice.Decision
	now, held, err := s.prepareHeld(&r, &q, &buf, &d)
	if err != nil || held {
		return d, err
	}
	return s.takeRemote(ctx, &q, now, false)
}

// prepareHeld prepares r into q, its state key's bytes into buf, and
// decides it into d from its lease if it is a request a lease can cover
// and the lease this instance holds does (held). Otherwise q is complete,
// its key strings built, for the near cache and Redis; now is the
// decision's one reading of localNow. The lease is looked up by the state
// key's bytes: a covered request, the usual one, builds no string and
// allocates nothing.
func (s *Store) prepareHeld(r *sluice.Request, q *request, buf *[128]byte, d *sluice.Decision) (now time.Time, held bool, err error) {
	c, err := s.prepareArgs(*r, q)
	if err != nil {
		return now, false, err
	}
	state := s.appendState(buf[:0], r, c.name)
	now = s.localNow()
	if s.mayLease(*r) && s.leases.takeHeldAt(state, q, d, now) {
		return now, true, nil
	}
	s.prepareKeys(q, state)
	return now, false, nil
}

// TakeLocal decides r from what this instance holds, without calling
// Redis, and reports whether it could: for a request a quota lease can
// cover (Config.Leases, a token bucket, GCRA or fixed window), a refusal
// the near cache remembers or the units its lease holds (Redis counted
// them when it handed them out, so the decision is exact). When it could
// not, nothing was charged, and p holds r prepared: p.Take decides it on
// Redis as Take would have. Package failover calls it before its breaker
// and deadline, and while Redis cannot be reached: an answer that needs
// no round trip costs no deadline and says nothing of Redis's health.
func (s *Store) TakeLocal(r sluice.Request, p *Prepared) (sluice.Decision, bool) {
	return s.takeLocal(&r, p)
}

// takeLocal is TakeLocal: r prepared into p, and decided from its lease,
// or a refusal the near cache remembers, if it is a request a lease can
// cover (another is counted by failover's breaker as Take answers it).
// Every field of p is set here, by assignment: p may be reused.
func (s *Store) takeLocal(r *sluice.Request, p *Prepared) (d sluice.Decision, ok bool) {
	p.s, p.qs, p.check, p.asked = s, nil, false, false
	var buf [128]byte
	p.now, ok, p.err = s.prepareHeld(r, &p.q, &buf, &d)
	p.ready = !ok // left for Redis, or its error
	if ok || p.err != nil || !s.mayLease(*r) {
		return d, ok
	}
	p.asked = true
	if d, ok = s.near.get(p.q.state, &p.q.Limit, r.Cost, r.MaxDelay, p.now); ok {
		p.ready = false
	}
	return d, ok
}

// Take decides on Redis the request TakeLocal prepared and could not
// decide, as Store.Take does once its local answers have none, or returns
// the error preparing it found. It charges nothing if the request is
// refused. If ctx ends while the script is in flight, it returns ctx's
// error, and the request may have been charged.
func (p *Prepared) Take(ctx context.Context) (sluice.Decision, error) {
	switch {
	case !p.ready || p.check:
		return sluice.Decision{}, errNotPrepared
	case p.err != nil:
		return sluice.Decision{}, p.err
	}
	return p.s.takeRemote(ctx, &p.q, p.now, p.asked)
}

// takeRemote decides q, prepared, on Redis, after the near cache unless
// it has been asked (asked), as Take does once the leases the instance
// holds have not covered it; now is the decision's reading of localNow.
func (s *Store) takeRemote(ctx context.Context, q *request, now time.Time, asked bool) (sluice.Decision, error) {
	if !asked {
		if d, ok := s.near.get(q.state, &q.Limit, q.Cost, q.MaxDelay, now); ok {
			return d, nil
		}
	}
	var d [1]sluice.Decision
	if ok, err := s.leases.take(ctx, []request{*q}, d[:], now); ok {
		if err != nil {
			return sluice.Decision{}, err
		}
		return d[0], nil
	}
	c := s.call(scripts().takeOne[q.p.Alg], []request{*q}, nil)
	if err := s.await(ctx, c); err != nil {
		return sluice.Decision{}, s.wrap(err, "take", *q)
	}
	if d, ok := c.unpacked(); ok { // an admission: nothing for the near cache
		return d, nil
	}
	if _, err := decode(c.reply, d[:]); err != nil {
		return sluice.Decision{}, s.wrap(err, "take", *q)
	}
	s.remember(*q, d[0])
	return d[0], nil
}

// mayLease reports whether r is one a lease can cover: leases are on, r's
// algorithm leases, and r charges. TakeLocal and TakeAllLocal answer only
// those, near-cache refusals included.
func (s *Store) mayLease(r sluice.Request) bool {
	return s.leases != nil && leasable(r.Limit.Algorithm) && r.Cost > 0
}

// TakeAll decides rs all-or-nothing: in one script when they share a slot,
// otherwise by charging each slot's part and refunding them if any refuses
// (see the package documentation for that mode's guarantee).
//
// TakeAll returns when ctx ends, with ctx's error, whatever its calls are
// waiting for. A check in one script may then have been charged, in whole;
// the parts of a check across slots are refunded in the background once
// their replies arrive, so it is not left charged.
//
// If the near cache knows one request is refused, the whole check is refused
// without a round trip: that request gets its remembered decision and the
// others a refusal with RetryAfter 0 and Remaining 0 (their state was not
// read).
func (s *Store) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	var p Prepared
	if s.takeAllLocal(rs, ds, &p, true) {
		return nil
	}
	return p.TakeAll(ctx, ds)
}

// TakeAllLocal is TakeLocal for a check: it decides rs all-or-nothing,
// writing one decision per request into ds, if a refusal the near cache
// remembers refuses the check or the leases this instance holds cover
// every request, and reports whether it did. When it did not, nothing was
// charged, and p holds the check prepared: p.TakeAll decides it on Redis.
func (s *Store) TakeAllLocal(rs []sluice.Request, ds []sluice.Decision, p *Prepared) bool {
	return s.takeAllLocal(rs, ds, p, false)
}

// takeAllLocal prepares rs into p and decides the check from what the
// instance holds if it can: for any check if all is set (TakeAll), from a
// refusal the near cache remembers; else (TakeAllLocal) only a check whose
// every request a lease can cover, from the leases it holds, then the near
// cache. The leases come first there: a request the near cache remembers a
// refusal for has an empty lease (the refusal was its lease call's), so
// the check is not covered, and the near cache then refuses it.
func (s *Store) takeAllLocal(rs []sluice.Request, ds []sluice.Decision, p *Prepared, all bool) bool {
	*p = Prepared{s: s, check: true, ready: true}
	if p.err = s.prepareAll(rs, ds, p); p.err != nil {
		return false
	}
	p.now = s.localNow()
	if !all {
		for _, r := range rs {
			if !s.mayLease(r) {
				return false
			}
		}
		if s.leases.takeHeld(p.qs, ds, p.now) {
			p.ready = false // decided: nothing is left for Redis
			return true
		}
	}
	p.asked = true
	p.ready = !s.nearRefusal(p.qs, ds, p.now)
	return !p.ready
}

// prepareAll prepares the requests of a check into p.qs.
func (s *Store) prepareAll(rs []sluice.Request, ds []sluice.Decision, p *Prepared) error {
	if len(ds) != len(rs) {
		return fmt.Errorf("redisstore: TakeAll: %d requests but %d decisions", len(rs), len(ds))
	}
	p.qs = make([]request, len(rs))
	for i, r := range rs {
		for j := range i {
			if r.Key == rs[j].Key && r.Limit.Shares(rs[j].Limit) {
				return fmt.Errorf("%w: key %q under %s", sluice.ErrDuplicateRequest, r.Key, r.Limit)
			}
		}
		if err := s.prepare(r, &p.qs[i]); err != nil {
			return err
		}
	}
	return nil
}

// TakeAll decides on Redis, writing into ds, the check TakeAllLocal
// prepared and could not decide, as Store.TakeAll does once its local
// answers have none, or returns the error preparing it found.
func (p *Prepared) TakeAll(ctx context.Context, ds []sluice.Decision) error {
	switch {
	case !p.ready || !p.check:
		return errNotPrepared
	case p.err != nil:
		return p.err
	case len(ds) != len(p.qs):
		return fmt.Errorf("redisstore: TakeAll: %d requests prepared but %d decisions", len(p.qs), len(ds))
	}
	s, qs := p.s, p.qs
	// A request known to be refused refuses the whole check, locally.
	if !p.asked && s.nearRefusal(qs, ds, p.now) {
		return nil
	}
	if ok, err := s.leases.take(ctx, qs, ds, p.now); ok {
		return err
	}
	return s.takeGroups(ctx, qs, ds)
}

// nearRefusal refuses the whole check qs locally, writing its decisions
// into ds, when the near cache holds a refusal for one of its requests.
func (s *Store) nearRefusal(qs []request, ds []sluice.Decision, now time.Time) bool {
	for i, q := range qs {
		if d, ok := s.near.get(q.state, &q.Limit, q.Cost, q.MaxDelay, now); ok {
			for j := range ds {
				ds[j] = sluice.Decision{Limit: qs[j].p.Cap}
			}
			ds[i] = d
			return true
		}
	}
	return false
}

// takeGroups decides a check on Redis: one script per Cluster slot its
// requests span, and, if a part refuses, the refund of the others.
func (s *Store) takeGroups(ctx context.Context, qs []request, ds []sluice.Decision) error {
	groups := s.groups(qs)
	calls := make([]*call, len(groups))
	for g, idx := range groups {
		var undo []string
		if len(groups) > 1 { // ask for undo tokens: a refund may follow
			undo = make([]string, len(idx))
			for k := range undo {
				undo[k] = "1"
			}
		}
		rs := qs // one group: the check in its order, no copy
		if len(groups) > 1 {
			rs = pick(qs, idx)
		}
		calls[g] = s.call(takeFor(rs), rs, undo)
		calls[g].part = len(groups) > 1
		if err := s.batch.submit(ctx, calls[g]); err != nil {
			s.settleLater(calls[:g], qs, groups)
			return s.wrap(err, "check", qs[0])
		}
	}
	if err := s.wait(ctx, calls); err != nil {
		s.settleLater(calls, qs, groups)
		return s.wrap(err, "check", qs[0])
	}
	if err := s.settle(calls, qs, ds, groups, false); err != nil {
		return s.wrap(err, "check", qs[0])
	}
	for i, q := range qs {
		s.remember(q, ds[i])
	}
	return nil
}
