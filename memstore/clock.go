package memstore

import (
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// reading is the coarse clock's word (Store.coarse): its last reading, in
// µs since the Unix epoch, and whether a decision has read it. Its states:
//
//	value   state    meaning                                       written by
//	t > 0   read     the reading t, read by a decision since it    raise (raiseRead), nowSlow (from unread)
//	                 was taken: the ticker keeps ticking
//	-t < 0  unread   a tick's reading t, not read yet              raise (raiseTick)
//	0       asleep   no coarse clock, or its ticker sleeps after   the ticker alone (Store.background)
//	                 parkAfter without a decision: decisions read
//	                 the clock, and the first wakes the ticker
//
// Only the ticker lowers its time, to 0 when it sleeps: raise never makes
// it go back (see Store.now).
type reading int64

// at returns the reading's time, and whether it is one a decision may use
// without the slow path (read).
func (c reading) at() (int64, bool) { return int64(c), c > 0 }

// read reports whether the reading is one a decision may use as its
// time without the slow path: then the reading is that time.
func (c reading) read() bool { return c > 0 }

// unread returns an unread reading's time, and whether it is one.
func (c reading) unread() (int64, bool) { return -int64(c), c < 0 }

// time is the reading's time, read or not (0 asleep).
func (c reading) time() int64 { return max(int64(c), -int64(c)) }

// readAt is the reading t, read; unreadAt the reading t, not yet read.
func readAt(t int64) reading   { return reading(t) }
func unreadAt(t int64) reading { return -reading(t) }

// atomicReading is a reading read and written atomically (see
// atomicIdent).
type atomicReading struct {
	_ [0]atomic.Int64
	v int64
}

func (a *atomicReading) Load() reading   { return reading(atomic.LoadInt64(&a.v)) }
func (a *atomicReading) Store(c reading) { atomic.StoreInt64(&a.v, int64(c)) }
func (a *atomicReading) CompareAndSwap(old, new reading) bool {
	return atomic.CompareAndSwapInt64(&a.v, int64(old), int64(new))
}

// now returns the store's time in µs since the Unix epoch: with a coarse
// clock the last reading. It is small enough to inline; nowSlow does the
// rest.
//
// A decision reads it with its key's lock held, so every decision on that
// key before it read it earlier; and no reading is earlier than one read
// before it (the monotonic clock never goes back, and nor does the coarse
// reading: see raise). A decision is therefore never made at a time
// earlier than one its key was already decided at, as it could be if the
// clock were read before the lock and the goroutine then waited: that
// would refuse what the later time had already made room for.
//
// With the coarse clock, a refusal decided again at the exact time
// (recheck) and TakeAll read the clock itself, which is ahead of the
// coarse reading by less than a Resolution. They leave the coarse reading
// as it is (raising it would be a write to one line that every decision
// reads, for each of them) and mark the key instead (markAhead): its next
// decisions are made at that exact time until the coarse reading passes it
// (timeOf).
func (s *Store) now() int64 {
	// c > 0 is c.read(), written out: the call would take now over the
	// inliner's budget (TestHotPathInlines).
	if c := s.coarse.Load(); c > 0 {
		return int64(c)
	}
	return s.nowSlow()
}

// nowSlow is now when the clock is exact, when the coarse reading is the
// first since the last tick (negative: it marks it read), or when the
// ticker sleeps (0: it wakes it and reads the clock, and makes that
// reading the coarse one, so that the ticker's first, which it may have
// taken earlier, does not go back from it).
func (s *Store) nowSlow() int64 {
	if !s.ticking {
		return s.readClock()
	}
	c := s.coarse.Load()
	if t, unread := c.unread(); unread {
		s.coarse.CompareAndSwap(c, readAt(t))
		return t
	}
	if t, read := c.at(); read {
		return t
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	now := s.readClock()
	s.raise(now, raiseRead)
	return now
}

// How raise changes the coarse reading c.
const (
	raiseTick = iota // to -max(|c|, v): a tick, not yet read
	raiseRead        // to max(|c|, v): read (the ticker wakes, or a decision woke it)
)

// raise makes the coarse reading at least v: it never goes back, so that
// with every reading taken under the key's lock, each decision on a key is
// made at a time no earlier than the one before it (see now). Only the
// ticker lowers it, to 0 when it sleeps, and then decisions read the clock
// itself, which is later still.
func (s *Store) raise(v int64, how int) {
	for {
		c := s.coarse.Load()
		n := readAt(max(c.time(), v))
		if how == raiseTick {
			n = unreadAt(max(c.time(), v))
		}
		if n == c || s.coarse.CompareAndSwap(c, n) {
			return
		}
	}
}

func (s *Store) readClock() int64 {
	if s.clock != nil {
		return s.clock().UnixMicro()
	}
	return s.baseUS + int64(time.Since(s.base)/time.Microsecond)
}

// timeOf returns the time to decide on e at, its lock held: now, or the
// exact time it was last decided at (markAhead) while the coarse reading
// is behind it.
func (s *Store) timeOf(e *entry) int64 {
	now := s.now()
	if _, marked := e.shut.Load().ahead(); marked {
		return s.ahead(e, now)
	}
	return now
}

// ahead is timeOf for an entry marked by markAhead, given the reading now.
func (s *Store) ahead(e *entry, now int64) int64 {
	if t, _ := e.shut.Load().ahead(); now < t {
		return t
	}
	e.shut.Store(shutOpen)
	return now
}

// markAhead records on e, its lock held, that it was just decided at the
// exact time at, which the coarse reading may be behind (see timeOf). It
// clears e's word: refuse reads the coarse reading, which would answer as
// of an earlier time than the lock's path. An entry whose limit has
// changed keeps its mark of that (shutChanged): its next decision can then
// be made up to a Resolution earlier, which the algorithms take as the
// clock gone back that much (at most that much more pessimistic; a
// refusal a later time could change is decided again at the exact time).
func (s *Store) markAhead(e *entry, at int64) {
	if s.ticking && e.shut.Load() != shutChanged {
		e.shut.Store(aheadOf(at))
	}
}

// recheckBelow is the RetryAfter under which a refusal made as of a coarse
// reading is decided again at the exact time: the reading may be what
// refused it. A longer refusal would need a reading that much stale.
const recheckBelow = time.Second

// recheck decides a request of cost and maxDelay on e, which is locked,
// again at the exact time, after a refusal d as of a coarse reading, and
// returns that time.
func (s *Store) recheck(e *entry, p *algo.Params, st *algo.State, cost int64, maxDelay time.Duration, d *sluice.Decision) int64 {
	at := s.readClock()
	algo.StepTo(p, st, at, cost, algo.MaxDelay(maxDelay), s.lease(p, cost), true, d)
	s.markAhead(e, at)
	return at
}

// background sweeps every sweepEvery and, with a coarse clock, reads the
// clock every resolution while decisions read it.
func (s *Store) background(sweepEvery, resolution time.Duration) {
	defer close(s.done)
	var sweep, tick <-chan time.Time
	if sweepEvery > 0 {
		t := time.NewTicker(sweepEvery)
		defer t.Stop()
		sweep = t.C
	}
	var ticker *time.Ticker
	if s.ticking {
		ticker = time.NewTicker(resolution)
		defer ticker.Stop()
		tick = ticker.C
	}
	sleepAfter := max(1, int(parkAfter/resolution))
	idle := 0
	for {
		select {
		case <-s.stop:
			return
		case <-sweep:
			s.sweep()
		case <-tick:
			if _, read := s.coarse.Load().at(); read {
				idle = 0
			} else if idle++; idle >= sleepAfter {
				// Nobody reads it: sleep until a decision wakes us.
				ticker.Stop()
				tick = nil
				s.coarse.Store(0)
				continue
			}
			s.raise(s.readClock(), raiseTick)
		case <-s.wake:
			s.raise(s.readClock(), raiseRead)
			idle = 0
			ticker.Reset(resolution)
			tick = ticker.C
		}
	}
}

// parkAfter is how long the coarse clock keeps ticking without a decision
// reading it.
const parkAfter = 100 * time.Millisecond
