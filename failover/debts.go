package failover

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// debts are the costs the fallback store admitted while the primary could
// not decide, by key and the identity of its state (algorithm and Version:
// see sluice.Limit), charged under the latest limit admitted under (the
// primary carries a changed limit's state over): the primary never saw
// them, and a limit that refilled meanwhile (a token bucket's burst, a new
// window) would admit them a second time once it answers again. They are charged to the
// primary after its next success, in the background, so that a stall's
// admissions count once, in the fallback and then in the primary. Safe for
// concurrent use.
type debts struct {
	// mu guards the map; a key's debt is updated under its read lock,
	// which every caller admitted by the fallback takes at once (a lock
	// they all queued on made each of them wait a pass of the scheduler's
	// run queue on a saturated machine; see Store.setGate). The write lock
	// adds a key and takes the debts.
	mu      sync.RWMutex
	owed    map[debtKey]*owing // at most maxDebts
	pending atomic.Bool        // owed is not empty
	running atomic.Bool        // a goroutine is charging them
	wg      sync.WaitGroup
	closing chan struct{}
	once    sync.Once
}

// debtKey is a key's state: limits that share it (sluice.Limit.Shares)
// owe together. The key goes with its Slot (sluice.Request.Slot), which
// names it in the primary.
type debtKey struct {
	key, slot string
	alg       sluice.Algorithm
	version   uint32
}

// owing is what one debtKey owes (0: nothing) and the latest limit it was
// admitted under, to charge it under.
type owing struct {
	cost  atomic.Int64
	limit atomic.Pointer[sluice.Limit]
}

// under makes l the limit o is charged under.
func (o *owing) under(l sluice.Limit) {
	if p := o.limit.Load(); p == nil || *p != l {
		o.limit.Store(&l)
	}
}

// debt is what take returns for one debtKey.
type debt struct {
	limit sluice.Limit
	cost  int64
}

// maxDebts bounds the keys remembered during one outage; past it, the
// admissions of new keys are not charged afterwards (the limits' bound is
// then exceeded by at most what the fallback admitted for them).
const maxDebts = 10_000

// add remembers that the fallback admitted r, or, for a negative cost (a
// refund, see Store.Adjust), lowers what is owed for its key. Concurrency
// leases are not debts: they end by their TTL or their release.
func (d *debts) add(r sluice.Request) {
	if algo.Leases(r.Limit.Algorithm) || r.Cost == 0 {
		return
	}
	k := debtKey{r.Key, r.Slot, r.Limit.Algorithm, r.Limit.Version}
	d.mu.RLock()
	owed := d.owed[k]
	if owed != nil {
		owe(&owed.cost, r.Cost, r.Limit.MaxAdjust())
		if r.Cost > 0 {
			owed.under(r.Limit)
		}
	}
	d.mu.RUnlock()
	if owed != nil || r.Cost < 0 {
		if r.Cost > 0 {
			d.pending.Store(true)
		}
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if owed = d.owed[k]; owed == nil {
		if len(d.owed) >= maxDebts {
			return
		}
		if d.owed == nil {
			d.owed = map[debtKey]*owing{}
		}
		owed = new(owing)
		d.owed[k] = owed
	}
	owe(&owed.cost, r.Cost, r.Limit.MaxAdjust())
	owed.under(r.Limit)
	d.pending.Store(true)
}

// owe adds cost to a debt, keeping it within 0 and most: one adjustment
// can charge no more (sluice.Limiter.Adjust).
func owe(owed *atomic.Int64, cost, most int64) {
	for {
		o := owed.Load()
		if owed.CompareAndSwap(o, min(max(o+cost, 0), most)) {
			return
		}
	}
}

// take returns the debts and forgets them.
func (d *debts) take() map[debtKey]debt {
	d.mu.Lock()
	owed := d.owed
	d.owed = nil
	d.pending.Store(false)
	d.mu.Unlock()
	m := make(map[debtKey]debt, len(owed))
	for k, v := range owed {
		if c := v.cost.Load(); c > 0 {
			m[k] = debt{*v.limit.Load(), c}
		}
	}
	return m
}

// settle starts charging the debts to the primary, unless they are none or
// a charge is under way. The primary has just answered.
func (s *Store) settle() {
	if !s.debts.pending.Load() || !s.debts.running.CompareAndSwap(false, true) {
		return
	}
	s.debts.wg.Go(func() {
		defer s.debts.running.Store(false)
		owed := s.debts.take()
		charged := 0
		for k, o := range owed {
			select {
			case <-s.debts.closing:
				return
			default:
			}
			if !s.charge(k, o) {
				break // the primary fails again: what is left waits for its next success
			}
			delete(owed, k)
			charged++
		}
		s.debts.restore(owed)
		s.cfg.Logger.Info("failover: charged the primary store for what the fallback admitted while it could not decide",
			"keys", charged, "still_owed", len(owed))
	})
}

// restore gives back the debts a charge did not get to, to be charged
// after the primary's next success, within the same bounds as add.
func (d *debts) restore(owed map[debtKey]debt) {
	for k, o := range owed {
		d.add(sluice.Request{Key: k.key, Slot: k.slot, Limit: o.limit, Cost: o.cost})
	}
}

// charge charges o to k's key on the primary, and reports whether the primary
// answered. A primary that can adjust (sluice.Adjuster) is charged all of
// it, past the limit into debt if need be, so that the requests after the
// outage pay for what the fallback admitted; another is charged all of it
// if the limit has room, else all the room it has.
func (s *Store) charge(k debtKey, o debt) bool {
	cost := o.cost
	r := sluice.Request{Key: k.key, Slot: k.slot, Limit: o.limit, Cost: cost}
	if pa, ok := s.primary.(sluice.Adjuster); ok {
		ctx, stop := s.deadline(context.Background(), time.Now())
		_, err := pa.Adjust(ctx, r)
		stop.Stop()
		return err == nil
	}
	r.Cost = min(cost, o.limit.Capacity()) // a Take can charge no more
	ctx, stop := s.deadline(context.Background(), time.Now())
	d, err := s.primary.Take(ctx, r)
	stop.Stop()
	if err != nil || d.Allowed || d.Remaining <= 0 {
		return err == nil
	}
	r.Cost = min(d.Remaining, cost)
	ctx, stop = s.deadline(context.Background(), time.Now())
	_, err = s.primary.Take(ctx, r)
	stop.Stop()
	return err == nil
}

// stopSettling stops charging debts and waits for the charge under way.
func (d *debts) stop() {
	d.once.Do(func() { close(d.closing) })
	d.wg.Wait()
}
