package memstore

import "sync/atomic"

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

// atomicReading is a reading read and written atomically.
type atomicReading struct{ v atomic.Int64 }

func (a *atomicReading) Load() reading   { return reading(a.v.Load()) }
func (a *atomicReading) Store(c reading) { a.v.Store(int64(c)) }
func (a *atomicReading) CompareAndSwap(old, new reading) bool {
	return a.v.CompareAndSwap(int64(old), int64(new))
}
