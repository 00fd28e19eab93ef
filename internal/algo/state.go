package algo

// State is the state of one key under one limit. Its zero value is a fresh
// key: an empty window, a full bucket, a cold warm-up.
//
// The meaning of X, Y and Z depends on the algorithm (see each step). The log
// (sliding_log, concurrency) is a queue of entries in time order: live
// entries are Log[Head:].
//
// The fields the buckets and the fixed window use (X, Y, Idle) come first,
// so that a store can keep them on one cache line with the key's lock.
type State struct {
	X, Y int64
	// Idle is the time (µs) from which this state is equivalent to a fresh
	// one; a store may forget the key after it.
	Idle int64
	Z    int64
	Log  []Entry
	Head int
}

// Entry is one record of a log: admitted requests for sliding_log (T is the
// admission time), leases for concurrency (T is the expiry).
type Entry struct {
	T    int64
	Cost int64
	ID   uint64
}

func (s *State) live() []Entry { return s.Log[s.Head:] }

// popFront drops the oldest live entry.
func (s *State) popFront() {
	s.Log[s.Head] = Entry{}
	s.Head++
	if s.Head == len(s.Log) {
		s.Log, s.Head = s.Log[:0], 0
	}
}

// push appends e, first compacting the queue when more than half of it is
// dead, so the backing array is reused and steady traffic does not allocate.
func (s *State) push(e Entry) {
	if s.Head > 0 && s.Head >= len(s.Log)/2 {
		n := copy(s.Log, s.Log[s.Head:])
		clear(s.Log[n:])
		s.Log, s.Head = s.Log[:n], 0
	}
	s.Log = append(s.Log, e)
}

// remove deletes the live entry at index i of live().
func (s *State) remove(i int) {
	i += s.Head
	copy(s.Log[i:], s.Log[i+1:])
	s.Log[len(s.Log)-1] = Entry{}
	s.Log = s.Log[:len(s.Log)-1]
	if s.Head == len(s.Log) {
		s.Log, s.Head = s.Log[:0], 0
	}
}

// prune drops the entries with T at or before cutoff, subtracting their
// cost from Y.
func (s *State) prune(cutoff int64) {
	for live := s.live(); len(live) > 0 && live[0].T <= cutoff; live = s.live() {
		s.Y -= live[0].Cost
		s.popFront()
	}
}

// newest returns the T of the newest entry, or -1 if there is none.
func (s *State) newest() int64 {
	if live := s.live(); len(live) > 0 {
		return live[len(live)-1].T
	}
	return -1
}

// covering returns the T of the entry at which the running total of costs,
// oldest first, reaches need. Callers ask for need ≤ Y, so one does; the
// newest entry answers otherwise.
func (s *State) covering(need int64) int64 {
	for _, e := range s.live() {
		if need -= e.Cost; need <= 0 {
			return e.T
		}
	}
	return s.newest()
}
