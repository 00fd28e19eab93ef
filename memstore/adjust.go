package memstore

import (
	"context"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

var _ sluice.Adjuster = (*Store)(nil)

// Adjust changes the usage of r.Key under r.Limit by r.Cost, a signed
// delta, under the key's lock: see sluice.Limiter.Adjust for the rules. A
// state kept under another limit of the key's identity (sluice.Limit.Shares)
// is carried over to r.Limit first, as by Take. A
// refund to a key the store does not hold changes nothing (its limit is
// unused already); a charge to one creates it. It allocates only when it
// creates a key.
func (s *Store) Adjust(_ context.Context, r sluice.Request) (sluice.Decision, error) {
	if s.closed.Load() {
		return sluice.Decision{}, sluice.ErrClosed
	}
	h := s.hash(r.Key)
	sh := &s.shards[s.shardOf(h)]
	w0, w1 := sh.pack(r.Key, h)
	if e, _ := sh.tab.Load().find(h, w0, w1, &r.Limit); e != nil {
		defer e.mu.Unlock()
		return s.adjust(e, &r)
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.lookup(h, r.Key, &r.Limit); e != nil {
		e.mu.Lock()
		defer e.mu.Unlock()
		return s.adjust(e, &r)
	}
	c, err := sh.compile(&r.Limit)
	if err == nil {
		err = c.p.CheckAdjust(r)
	}
	if err != nil {
		return sluice.Decision{}, err
	}
	at := s.fresh(sh)
	if r.Cost <= 0 {
		var st algo.State
		return algo.Adjust(&c.p, &st, at, 0), nil
	}
	e := s.insert(sh, h, r.Key, c) // not marked used, as a key first seen by Take
	defer e.mu.Unlock()
	_, k := e.limit()
	var st algo.State
	e.load(&st, k)
	d := algo.Adjust(&c.p, &st, at, r.Cost)
	e.store(&st, k)
	return d, nil
}

// adjust applies r to e, which is locked, its state carried over first if
// it is kept under another limit of r's identity, as Take does.
func (s *Store) adjust(e *entry, r *sluice.Request) (sluice.Decision, error) {
	now := s.timeOf(e)
	p, err := s.params(e, &r.Limit, now)
	if err == nil {
		err = p.CheckAdjust(*r)
	}
	if err != nil {
		return sluice.Decision{}, err
	}
	e.setFlags(idUsed, true)
	_, k := e.limit()
	var st algo.State
	e.load(&st, k)
	d := algo.Adjust(p, &st, now, r.Cost)
	e.store(&st, k)
	s.publish(e, p, &st, now)
	return d, nil
}
