package redisstore

import "github.com/sluicehq/sluice"

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

// HeldFor returns the units s holds in the lease of (key, lim).
func HeldFor(s *Store, key string, lim sluice.Limit) int64 {
	q, err := s.prepare(sluice.Request{Key: key, Limit: lim})
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
