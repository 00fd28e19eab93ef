package redisstore

import (
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// Held returns the units s holds in quota leases, over every key.
func Held(s *Store) int64 {
	l := s.leases
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, e := range l.byKey {
		e.mu.Lock()
		n += e.tokens
		e.mu.Unlock()
	}
	return n
}

// Kill stops s as a crash would: what its leases hold is dropped, never
// given back, and it returns how much that was. s answers nothing after.
func Kill(s *Store) (lost int64) {
	l := s.leases
	l.mu.Lock()
	l.closed = true
	close(l.stop)
	for _, e := range l.byKey {
		e.mu.Lock()
		lost += e.tokens
		e.tokens = 0
		e.mu.Unlock()
	}
	l.mu.Unlock()
	<-l.swept
	s.batch.close()
	return lost
}

// Killer kills a Store as a crash would at a moment its lease of one
// key provably holds units: right after a lease call for it landed,
// before any request spent them (ArmKill).
type Killer struct {
	s      *Store
	armed  atomic.Bool
	fired  chan int64    // what the lease held when it froze
	thawed chan struct{} // closed by Release
}

// ArmKill prepares s, before any traffic, to be killed by Kill. With it,
// s's leases check a hook after every grant.
func ArmKill(s *Store, key string, lim sluice.Limit) *Killer {
	k := &Killer{s: s, fired: make(chan int64, 1), thawed: make(chan struct{})}
	var q request
	s.prepare(sluice.Request{Key: key, Limit: lim}, &q)
	s.leases.granted = func(e *lease) {
		if e.q.state != q.state || e.tokens == 0 || !k.armed.CompareAndSwap(true, false) {
			return
		}
		// Frozen here, with the lease's lock held and its call not yet
		// ended: every request of the key waits, no other lease call
		// for it is in flight, and what it holds is what dies with s.
		k.fired <- e.tokens
		<-k.thawed
		e.tokens = 0 // lost
	}
	return k
}

// Kill waits for the next lease call of the key that leaves its lease
// holding units, freezes s there, and returns what the lease held; 0 if
// none came before deadline. s answers nothing after (Release ends it).
func (k *Killer) Kill(deadline time.Time) (lost int64) {
	k.armed.Store(true)
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case lost = <-k.fired:
		return lost
	case <-t.C:
		if k.armed.CompareAndSwap(true, false) {
			return 0
		}
		return <-k.fired // fired as the deadline came
	}
}

// Release lets the requests frozen by Kill return (with errors: s is
// closed first, what it held dropped), so that their goroutines end.
func (k *Killer) Release() {
	s, l := k.s, k.s.leases
	s.batch.close()
	close(k.thawed)
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.stop)
	}
	for _, e := range l.byKey {
		e.mu.Lock()
		e.tokens = 0
		e.mu.Unlock()
	}
	l.mu.Unlock()
	<-l.swept
}

// HeldFor returns the units s holds in the lease of (key, lim).
func HeldFor(s *Store, key string, lim sluice.Limit) int64 {
	return HeldIn(s, sluice.Request{Key: key, Limit: lim})
}

// HeldIn returns the units s holds in the lease of r's key (r.Key in
// r.Slot) under r.Limit.
func HeldIn(s *Store, r sluice.Request) int64 {
	var q request
	err := s.prepare(r, &q)
	if err != nil || s.leases == nil {
		return 0
	}
	s.leases.mu.RLock()
	e := s.leases.byKey[q.state]
	s.leases.mu.RUnlock()
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.tokens
}

// SettleLeases waits until what s gives back has reached Redis.
func SettleLeases(s *Store) { s.leases.returns.wait() }
