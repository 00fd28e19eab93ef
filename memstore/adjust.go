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
	if e, _ := sh.tab.Load().find(h, r.Key, &r.Limit); e != nil {
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
	e := newEntry(r.Key, c)
	d := algo.Adjust(&c.p, &e.st, s.fresh(sh), max(r.Cost, 0))
	if r.Cost > 0 {
		sh.insert(h, e, s.perShard) // not marked used, as a key first seen by Take
	}
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
	e.used = true
	d := algo.Adjust(p, &e.st, now, r.Cost)
	s.publish(e, p, now)
	return d, nil
}
