package memstore

// This file is the first part of the table whose slots are the entries
// (bench/RESULTS.md, tenth run): a 64-byte slot, its identity and the
// protocol by which a reader without the slot's lock knows that what it
// read belongs to one occupant. The store does not use it yet.

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/internal/algo"
)

// slotKey is the longest key a slot holds in itself. A longer key is held
// in the slot's cold part, and the slot's identity holds its length and
// hash.
const slotKey = 13

// slotEntry is one slot of a table and the state of the (key, limit) it
// holds: 64 bytes, one cache line, all that a token bucket, GCRA, leaky
// bucket or fixed window decision on a key of up to slotKey bytes reads
// and writes. The rest (a longer key, the sliding window's and the logs'
// state) is in a cold part that ref points to.
//
// What the slot holds changes only under its lock (and the shard's): a
// reader holding the lock reads it as it is. A reader without the lock
// (Store.refuse) reads id with the protocol of a sequence lock: see
// setIdentity and stable.
type slotEntry struct {
	mu sync.Mutex

	// shut is the refusal word (algo.Closed) of the state, as entry.shut.
	// Every identity change sets it to 0 first.
	shut atomic.Int64

	// ref is the limit the state is kept under: a *compiled, or, for a
	// slot with a cold part, a pointer one byte into its *cold (odd: see
	// setRef). A limit never changes in place: a changed limit or a new
	// cold part is a new pointer.
	ref atomic.Pointer[byte]

	// id is what the slot holds: word 0 has the key's length (idLen: 0
	// while empty, idLong for a key longer than slotKey), the flags, the
	// generation (idGen; odd while the identity is being changed) and
	// key bytes 0-4 (or, for a long key, its length); word 1 has key
	// bytes n-8..n-1 (or bytes 0..n-1 of a key under 8 bytes, or, for a
	// long key, its hash). See packKey.
	id [2]atomic.Uint64

	x, y, idle int64 // algo.State's X, Y and Idle
}

// Fields of slotEntry.id[0].
const (
	idLen    = 1<<5 - 1 // bits 0-4: the key's length
	idLong   = idLen    // the key is longer than slotKey
	idUsed   = 1 << 5   // used since the eviction hand or the sweeper last passed
	idPinned = 1 << 6   // held by a TakeAll
	idFlags  = idUsed | idPinned
	idGen1   = 1 << 8 // bits 8-23: the generation
	idGen    = (1<<16 - 1) * idGen1
	idKey    = 24 // bits 24-63: key bytes 0-4, or a long key's length
)

// packKey returns the identity words of key, with the generation and
// flags 0, and key's hash h for a long one: two keys of up to slotKey
// bytes differ iff their words do. It reads a key of 8 bytes or more as
// its first and last 8 bytes, as hashShort does.
func packKey(key string, h uint64) (w0, w1 uint64) {
	n := len(key)
	switch {
	case n > slotKey:
		return idLong | uint64(n)<<idKey, h
	case n >= 8:
		b := unsafe.Slice(unsafe.StringData(key), n) // read only
		le := binary.LittleEndian
		return uint64(n) | le.Uint64(b)<<idKey, le.Uint64(b[n-8:])
	}
	var b [8]byte
	copy(b[:], key)
	w1 = binary.LittleEndian.Uint64(b[:])
	return uint64(n) | (w1&(1<<40-1))<<idKey, w1
}

// cold is the part of a slot's entry that does not fit in its line.
type cold struct {
	_   byte // ref points at pad, one byte in (see setRef)
	pad byte
	c   *compiled
	key string // the key, if longer than slotKey
	z   int64  // algo.State's Z
	log []algo.Entry
	hd  int // algo.State's Head
}

// setRef makes the slot's limit c, with the cold part k (nil: none). The
// slot's lock is held.
func (e *slotEntry) setRef(c *compiled, k *cold) {
	if k == nil {
		e.ref.Store((*byte)(unsafe.Pointer(c)))
		return
	}
	k.c = c
	e.ref.Store(&k.pad)
}

// limit returns the slot's limit and its cold part, if any.
func (e *slotEntry) limit() (*compiled, *cold) {
	p := e.ref.Load()
	if uintptr(unsafe.Pointer(p))&1 == 0 {
		return (*compiled)(unsafe.Pointer(p)), nil
	}
	k := (*cold)(unsafe.Add(unsafe.Pointer(p), -int(unsafe.Offsetof(cold{}.pad))))
	return k.c, k
}

// setIdentity makes the slot hold the identity (w0, w1) (from packKey,
// with flags) under the limit c with cold part k: the refusal word is
// cleared, the generation made odd, the identity and limit written, then
// the generation made even again. A reader that reads the same even
// generation before and after what it reads (stable) read one identity
// and its limit. The slot's lock is held.
func (e *slotEntry) setIdentity(w0, w1 uint64, c *compiled, k *cold) {
	e.shut.Store(0)
	step()
	gen := e.id[0].Load() & idGen         // even
	e.id[0].Store((gen + idGen1) & idGen) // odd: changing (the length bits 0: empty meanwhile)
	step()
	e.id[1].Store(w1)
	step()
	e.setRef(c, k)
	step()
	e.id[0].Store(w0&^idGen | (gen+2*idGen1)&idGen)
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
func (e *slotEntry) clear() {
	e.setIdentity(0, 0, nil, nil)
	e.x, e.y, e.idle = 0, 0, 0
}

// setFlags sets or clears the flags f in the slot's identity without
// changing the generation (readers without the lock compare the identity
// without its flags). The slot's lock is held.
func (e *slotEntry) setFlags(f uint64, on bool) {
	w := e.id[0].Load()
	n := w &^ f
	if on {
		n = w | f
	}
	if n != w {
		e.id[0].Store(n)
	}
}

// stable reports whether a reader without the lock that read id word 0 as
// w0 before reading the rest read one identity throughout: the generation
// was even and still is (flags may have changed meanwhile; they are not
// part of the identity).
func (e *slotEntry) stable(w0 uint64) bool {
	return w0&idGen1 == 0 && (e.id[0].Load()^w0)&^idFlags == 0
}

// peek is the first half of the read that Store.refuse makes without the
// slot's lock: whether the slot holds the key packed as (w0, w1) (a key of
// up to slotKey bytes, no cold part) under a limit same accepts, with a
// refusal word set. It returns the word, the limit and the identity word
// still checks. Between peek and still the caller reads the clock.
func (e *slotEntry) peek(w0, w1 uint64, same func(*compiled) bool) (w int64, c *compiled, i0 uint64, ok bool) {
	w = e.shut.Load()
	if w <= 0 {
		return 0, nil, 0, false
	}
	step()
	i0 = e.id[0].Load()
	step()
	if (i0^w0)&^(idFlags|idGen) != 0 || e.id[1].Load() != w1 {
		return 0, nil, 0, false
	}
	step()
	c, k := e.limit()
	if k != nil || c == nil || !same(c) {
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
func (e *slotEntry) still(w int64, i0 uint64) bool {
	if e.shut.Load() != w {
		return false
	}
	step()
	return e.stable(i0)
}
