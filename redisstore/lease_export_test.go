package redisstore

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
