package memstore

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// slotKey is the longest key a slot holds in itself. A longer key is
// identified in it by two independent hashes (packKey).
const slotKey = 13

// entry is one slot of a table and the state of the (key, limit) it
// holds: 64 bytes, one cache line, all that a token bucket, GCRA, leaky
// bucket, warm-up or fixed window decision reads and writes. The sliding
// window's third number and the logs are in a cold part that ref points
// to. TestEntryLayout holds the size.
//
// What the slot holds changes only under its lock (and the shard's): a
// reader holding the lock reads it as it is. A reader without the lock
// (Store.refuse) reads id with the protocol of a sequence lock: the
// package doc's "Concurrency protocol" tells it.
type entry struct {
	mu sync.Mutex

	// shut is the refusal word, written under mu: refusing, it lets a
	// request of cost 1 the state refuses be refused without taking mu
	// (Store.refuse). shutWord has its states and who writes each.
	shut atomicShut

	// ref is the limit the state is kept under: a *compiled, or, for a
	// slot with a cold part, a pointer one byte into its *cold (odd: see
	// setRef), whose limit changes in place under the lock; readers
	// without the lock (peek) read only a *compiled, which never changes.
	ref atomic.Pointer[byte]

	// id and rest are what the slot holds: id the key's length, the
	// flags, the generation and key bytes 0-4 (see ident); rest key bytes
	// n-8..n-1 (or bytes 0..n-1 of a key under 8 bytes, or, for a long
	// key, its hash). See packKey.
	id   atomicIdent
	rest atomic.Uint64

	x, y, idle int64 // algo.State's X, Y and Idle
}

// ident is word 0 of a slot's identity (entry.id): what the slot holds,
// the flags, and the generation of a sequence lock. Its fields:
//
//	bits   field     values
//	0-4    length    0: empty, or an identity change under way; n+1 for a key of n ≤ slotKey bytes; idLong
//	5      used      idUsed: used since the eviction hand or the sweeper last passed
//	6      pinned    idPinned: held by a TakeAll
//	7      dead      idDead: removed by a TakeAll, still in its slot (markDead)
//	8-23   gen       the generation: odd while the identity changes (setIdentity)
//	24-63  key       key bytes 0-4, or 40 bits of a long key's second hash (packKey)
//
// A key as packKey packs it is an ident with the flags and the generation
// 0; a slot holds it while its word without them (name) equals it. The
// dead flag is part of the name, so that a dead entry matches no key.
type ident uint64

// Fields of an ident.
const (
	idLen    ident = 1<<5 - 1 // the length field
	idLong   ident = idLen    // the key is longer than slotKey: identified by its hashes
	idUsed   ident = 1 << 5
	idPinned ident = 1 << 6
	idDead   ident = 1 << 7
	idFlags        = idUsed | idPinned // changed without a new generation (setFlags)
	idGen1   ident = 1 << 8            // one step of the generation
	idGen          = (1<<16 - 1) * idGen1
	idKey          = 24 // the shift of the key field
)

// empty reports whether the word holds no key: an empty slot, or one whose
// identity is being changed.
func (w ident) empty() bool { return w&idLen == 0 }

// long reports whether the word holds a key longer than slotKey.
func (w ident) long() bool { return w&idLen == idLong }

// keyLen is the length of the key held, if empty and long are false.
func (w ident) keyLen() int  { return int(w&idLen) - 1 }
func (w ident) used() bool   { return w&idUsed != 0 }
func (w ident) pinned() bool { return w&idPinned != 0 }

// name is the word without its flags and generation: equal to packKey's
// word for the key held.
func (w ident) name() ident { return w &^ (idFlags | idGen) }

// with is w with the flags f set (on) or cleared.
func (w ident) with(f ident, on bool) ident {
	if on {
		return w | f
	}
	return w &^ f
}

// changing is the word that marks an identity change begun from w: the
// next (odd) generation and nothing else, so that the slot reads as empty
// meanwhile.
func (w ident) changing() ident { return (w&idGen + idGen1) & idGen }

// changed is the word that ends an identity change begun from w, to the
// key packed as k with the flags of k: the generation after the odd one.
func (w ident) changed(k ident) ident { return k&^idGen | (w&idGen+2*idGen1)&idGen }

// sameRead reports whether w, read by a reader without the lock before it
// read the rest of the slot, and now, read after, show one identity
// throughout: w's generation even (no change under way) and nothing but
// the flags moved since.
func (w ident) sameRead(now ident) bool { return w&idGen1 == 0 && (w^now)&^idFlags == 0 }

// atomicIdent is an ident read and written atomically. Like atomicShut
// and atomicReading, it calls the atomic functions on a plain word (the
// zero-length array aligns it to 8 bytes on 32-bit platforms, as
// atomic.Uint64 is): a method of an atomic.Uint64 inlined into this one
// would leave Take a no-op instruction per call (an inlining mark).
type atomicIdent struct {
	_ [0]atomic.Uint64
	v uint64
}

func (a *atomicIdent) Load() ident   { return ident(atomic.LoadUint64(&a.v)) }
func (a *atomicIdent) Store(w ident) { atomic.StoreUint64(&a.v, uint64(w)) }

// packKey returns the identity words of key (hash h), with the generation
// and flags 0. A key of up to slotKey bytes is its length and its bytes
// (packShort): two such keys differ iff their words do. A longer key is
// identified by h and 40 bits of a second hash of it, h2, independent of
// h (keyed with another seed): two long keys whose 104 bits collide (for
// 100,000 long keys in one table, about once in 2^71 tables) share one
// state, which counts each one's requests against both and never lets
// one pass uncounted.
func packKey(key string, h, h2 uint64) (w0 ident, w1 uint64) {
	if len(key) > slotKey {
		return idLong | ident(h2&(1<<40-1))<<idKey, h
	}
	return packShort(key)
}

// packShort is packKey for a key of up to slotKey bytes, small enough to
// inline into Take for a key of 8 bytes or more.
func packShort(key string) (w0 ident, w1 uint64) {
	n := len(key)
	if n < 8 {
		return packTiny(key)
	}
	b := unsafe.Slice(unsafe.StringData(key), n) // read only
	return ident(n+1) | ident(binary.LittleEndian.Uint64(b))<<idKey, binary.LittleEndian.Uint64(b[n-8:])
}

// packTiny is packShort for a key under 8 bytes.
func packTiny(key string) (w0 ident, w1 uint64) {
	var b [8]byte
	copy(b[:], key)
	w1 = binary.LittleEndian.Uint64(b[:])
	return ident(len(key)+1) | ident(w1&(1<<40-1))<<idKey, w1
}

// shutWord is a slot's refusal word (entry.shut): what a reader without
// the lock learns of the state and its clock. Its states:
//
//	value    state     meaning                                          written by (the slot's lock held)
//	0        open      no word: every request takes the lock            setIdentity, publish, ahead, unuse, markDead
//	w > 0    refusing  algo.Closed's word: a request of cost 1 is        publish, moveFrom (the state's own, moved with it)
//	                   refused without the lock before opensAt
//	-1       changed   the limit changed since the key came in: no       params
//	                   word is published again until the slot's
//	                   identity changes
//	-t < -1  ahead     decided at the exact time t, which the coarse     markAhead (not over changed)
//	                   reading is behind: decisions are made at t
//	                   until it passes it (ahead)
//
// moveFrom carries any of them with the state it moves to another slot.
//
// Every change to the state under the lock while the word is refusing
// republishes it or clears it, and an identity change clears it before it
// changes the identity: a refusing word a reader reads between two equal
// reads of the identity is the occupant's, for the state it has (see
// entry.peek and entry.still).
type shutWord int64

const (
	shutOpen    shutWord = 0
	shutChanged shutWord = -1
)

// closedWord is algo.Closed's word w (0, or positive: refusing).
func closedWord(w int64) shutWord { return shutWord(w) }

// aheadOf is the word marking a decision at the exact time t (t > 1).
func aheadOf(t int64) shutWord { return -shutWord(t) }

// refusing reports whether the word is algo.Closed's, refusing.
func (w shutWord) refusing() bool { return w > 0 }

// closed is the refusing word as algo.Closed returned it.
func (w shutWord) closed() int64 { return int64(w) }

// opensAt is the first µs at which a refusing word admits a request (its
// W: see algo.Closed).
func (w shutWord) opensAt() int64 { return int64(w) >> 1 }

// ahead returns the time of an ahead word, and whether it is one.
func (w shutWord) ahead() (int64, bool) { return -int64(w), w < shutChanged }

// marked reports whether the word is changed or ahead: publish then
// leaves it as it is.
func (w shutWord) marked() bool { return w < 0 }

// atomicShut is a shutWord read and written atomically (see atomicIdent).
type atomicShut struct {
	_ [0]atomic.Int64
	v int64
}

func (a *atomicShut) Load() shutWord   { return shutWord(atomic.LoadInt64(&a.v)) }
func (a *atomicShut) Store(w shutWord) { atomic.StoreInt64(&a.v, int64(w)) }

// compiled is a limit and its parameters.
type compiled struct {
	lim sluice.Limit
	p   algo.Params
}

// cold is the part of an entry that does not fit in its slot: the sliding
// window's third number (24 bytes), or also the log of the sliding log and
// concurrency (a coldLog, 56 bytes, whose first field this is).
type cold struct {
	_      byte // ref points at pad, one byte in (see setRef)
	pad    byte
	hasLog bool                     // k is the cold field of a coldLog
	c      atomic.Pointer[compiled] // read under the shard's lock alone (lookup), changed under the entry's
	z      int64                    // algo.State's Z
}

// coldLog is a cold part with algo.State's log.
type coldLog struct {
	cold
	entries []algo.Entry
	head    int
}

// logOf returns the coldLog k is part of, or nil.
func logOf(k *cold) *coldLog {
	if !k.hasLog {
		return nil
	}
	return (*coldLog)(unsafe.Pointer(k))
}

// newCold returns a cold part for an entry under c, or nil if its
// algorithm's state is X, Y and Idle alone.
func newCold(c *compiled) *cold {
	switch c.p.Desc().State {
	case algo.StateXYZ:
		return &cold{}
	case algo.StateLog:
		l := &coldLog{}
		l.hasLog = true
		return &l.cold
	}
	return nil
}

// setRef makes the slot's limit c, with the cold part k (nil: none). The
// slot's lock is held.
func (e *entry) setRef(c *compiled, k *cold) {
	if k == nil {
		e.ref.Store((*byte)(unsafe.Pointer(c)))
		return
	}
	k.c.Store(c)
	e.ref.Store(&k.pad)
}

// hasCold reports whether the ref p points into a cold part (odd: one byte
// in, see setRef) rather than at a *compiled.
func hasCold(p *byte) bool { return uintptr(unsafe.Pointer(p))&1 != 0 }

// limit returns the slot's limit and its cold part, if any.
func (e *entry) limit() (*compiled, *cold) {
	p := e.ref.Load()
	if !hasCold(p) {
		return (*compiled)(unsafe.Pointer(p)), nil
	}
	k := (*cold)(unsafe.Add(unsafe.Pointer(p), -int(unsafe.Offsetof(cold{}.pad))))
	return k.c.Load(), k
}

// setIdentity makes the slot hold the identity (w0, w1) (from packKey,
// with flags) under the limit c with cold part k: the refusal word is
// cleared, the generation made odd, the identity and limit written, then
// the generation made even again. A reader that reads the same even
// generation before and after what it reads (stable) read one identity
// and its limit. The slot's lock is held.
func (e *entry) setIdentity(w0 ident, w1 uint64, c *compiled, k *cold) {
	e.shut.Store(shutOpen)
	step()
	old := e.id.Load()
	e.id.Store(old.changing())
	step()
	e.rest.Store(w1)
	step()
	e.setRef(c, k)
	step()
	e.id.Store(old.changed(w0))
}

// step yields the processor when the test hooks are on (hooks_off.go):
// between the steps of an identity change and of the reads without the
// lock, so that a test's readers and writers meet every intermediate
// state.
func step() {
	if testHooks {
		hookStep()
	}
}

// clear empties the slot, which is locked.
func (e *entry) clear() {
	e.setIdentity(0, 0, nil, nil)
	e.x, e.y, e.idle = 0, 0, 0
}

// setFlags sets or clears the flags f in the slot's identity without
// changing the generation (readers without the lock compare the identity
// without its flags). The slot's lock is held.
func (e *entry) setFlags(f ident, on bool) {
	w := e.id.Load()
	if n := w.with(f, on); n != w {
		e.id.Store(n)
	}
}

// live reports whether the slot holds an entry. Under the shard's lock
// (no identity changes then) or the slot's.
func (e *entry) live() bool { return !e.id.Load().empty() }

// used reports whether the entry was used since the eviction hand or the
// sweeper last passed it.
func (e *entry) used() bool { return e.id.Load().used() }

// pinned reports whether a TakeAll holds the entry.
func (e *entry) pinned() bool { return e.id.Load().pinned() }

// holds reports whether the entry is the key packed as (w0, w1) by
// packKey. Under the shard's lock or the slot's.
func (e *entry) holds(w0 ident, w1 uint64) bool {
	return e.id.Load().name() == w0 && e.rest.Load() == w1
}

// is reports whether the entry, which holds key (holds), is its state
// under lim: with the identity of lim (sluice.Limit.Shares); exact if
// kept under lim itself. The entry's lock is held.
func (e *entry) is(lim *sluice.Limit) (found, exact bool) {
	c, _ := e.limit()
	if sameLimit(&c.lim, lim) {
		return true, true
	}
	return c.lim.Algorithm == lim.Algorithm && c.lim.Version == lim.Version, false
}

// keyBytes returns the entry's key in b, or nil for a key longer than
// slotKey.
func (e *entry) keyBytes(b *[slotKey]byte) []byte {
	w0, w1 := e.id.Load(), e.rest.Load()
	n := w0.keyLen()
	le := binary.LittleEndian
	switch {
	case w0.long():
		return nil
	case n >= 8:
		var head [8]byte
		le.PutUint64(head[:], uint64(w0>>idKey))
		copy(b[:5], head[:5])
		le.PutUint64(head[:], w1)
		copy(b[n-8:n], head[:])
		return b[:n]
	}
	var all [8]byte
	le.PutUint64(all[:], w1)
	copy(b[:], all[:n])
	return b[:n]
}

// markDead makes the entry match no key while it stays in its slot, so
// that probing past it still works until it is removed: its refusal word
// cleared, then the dead flag set (readers without the lock see the
// identity change). The entry's lock and its shard's are held.
func (e *entry) markDead() {
	e.shut.Store(shutOpen)
	e.setFlags(idDead, true)
}

// unuse clears the used flag, and with it the word that refuses without
// the lock: the next request takes the lock, which marks the entry used
// again, so that the eviction hand and the sweeper see refused keys as
// used. The entry's lock is held.
func (e *entry) unuse() {
	e.setFlags(idUsed, false)
	if e.shut.Load().refusing() {
		e.shut.Store(shutOpen)
	}
}

// moveFrom makes e, an empty slot, hold what src holds, with its flags and
// word, and empties src. Both are locked (or e is not yet visible).
func (e *entry) moveFrom(src *entry) {
	c, k := src.limit()
	e.setIdentity(src.id.Load(), src.rest.Load(), c, k)
	e.x, e.y, e.idle = src.x, src.y, src.idle
	w := src.shut.Load()
	src.clear()
	if w != shutOpen {
		e.shut.Store(w) // the state's own word, moved with it
	}
}

// load writes the entry's state, its cold part k's included, into st (a
// zero State), field by field: a State returned by value is built and then
// copied 16 bytes at a time, each copy waiting for the two 8-byte stores it
// spans (bench/RESULTS.md, eighth run). The entry's lock is held.
func (e *entry) load(st *algo.State, k *cold) {
	st.X, st.Y, st.Idle = e.x, e.y, e.idle
	if k != nil {
		st.Z = k.z
		if l := logOf(k); l != nil {
			st.Log, st.Head = l.entries, l.head
		}
	}
}

// store writes st back into the entry and its cold part k. The entry's
// lock is held.
func (e *entry) store(st *algo.State, k *cold) {
	e.x, e.y, e.idle = st.X, st.Y, st.Idle
	if k != nil {
		k.z = st.Z
		if l := logOf(k); l != nil {
			l.entries, l.head = st.Log, st.Head
		}
	}
}

// stable reports whether a reader without the lock that read id word 0 as
// w0 before reading the rest read one identity throughout: the generation
// was even and still is (flags may have changed meanwhile; they are not
// part of the identity).
func (e *entry) stable(w0 ident) bool {
	return w0.sameRead(e.id.Load())
}

// peek is the first half of the read that Store.refuse makes without the
// slot's lock: whether the slot holds the key packed as (w0, w1), with no
// cold part, under lim itself, with a refusal word set. It returns the
// word, the limit and the identity word that still checks. Between peek
// and still the caller reads the clock.
func (e *entry) peek(w0 ident, w1 uint64, lim *sluice.Limit) (w shutWord, c *compiled, i0 ident, ok bool) {
	w = e.shut.Load()
	if !w.refusing() {
		return 0, nil, 0, false
	}
	step()
	i0 = e.id.Load()
	step()
	if i0.name() != w0 || e.rest.Load() != w1 {
		return 0, nil, 0, false
	}
	step()
	ref := e.ref.Load()
	if ref == nil || hasCold(ref) { // a cold part: its limit may change in place
		return 0, nil, 0, false
	}
	c = (*compiled)(unsafe.Pointer(ref))
	if !sameLimit(&c.lim, lim) {
		return 0, nil, 0, false
	}
	return w, c, i0, true
}

// still reports whether what peek read (the word w, and the identity whose
// first word was i0) was one occupant's, and its word is still w: the
// word read again, then the identity's first word. If the generation was
// even and has not moved, no identity change ran between the two reads of
// the identity, so the second word, the key and the limit belong to that
// occupant (every identity change clears the word before it changes the
// identity, so a word set then was set by the occupant since). The
// generation has 16 bits: 32,768 identity changes of one slot while a
// reader is between the two reads would go unseen.
func (e *entry) still(w shutWord, i0 ident) bool {
	if e.shut.Load() != w {
		return false
	}
	step()
	return e.stable(i0)
}

// refuse is Take without the entry's lock for a request of cost 1 that the
// entry's word w (algo.Closed, read from e.shut) says its state refuses:
// it writes the refusal into d and reports true, or reports false (the
// request is then decided under the lock). It writes nothing shared, so
// that a key under a flood of refused requests stays in every core's
// cache instead of moving between them with its lock.
//
// Why the answer is the one the lock would give is told in the package
// doc's "Concurrency protocol".
func (s *Store) refuse(e *entry, w0 ident, w1 uint64, r *sluice.Request, d *sluice.Decision) bool {
	if r.Cost != 1 || r.MaxDelay < 0 {
		return false
	}
	w, c, i0, ok := e.peek(w0, w1, &r.Limit)
	if !ok {
		return false
	}
	now := s.now()
	if s.ticking && w.opensAt()-now < int64(recheckBelow/time.Microsecond) {
		return false
	}
	return algo.RefuseClosed(&c.p, w.closed(), now, d) && e.still(w, i0)
}

// publish sets e's word for its state, just decided or changed at time at
// (algo.Closed): 0 unless e is marked used, and never with Config.Now,
// whose readings may go back. With a coarse clock, a refusal under
// recheckBelow away is left to the lock's path (refuse would not answer
// it, and the word would only make Take read it first). e's lock is held.
func (s *Store) publish(e *entry, p *algo.Params, st *algo.State, at int64) {
	old := e.shut.Load()
	if old.marked() {
		return
	}
	w := shutOpen
	if e.used() && !s.given {
		w = closedWord(algo.Closed(p, st, at))
		if s.ticking && w.opensAt()-at < int64(recheckBelow/time.Microsecond) {
			w = shutOpen
		}
	}
	if w != old {
		e.shut.Store(w)
	}
}
