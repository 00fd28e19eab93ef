package memstore

import "sync/atomic"

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
func (w ident) keyLen() int { return int(w&idLen) - 1 }

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

// atomicIdent is an ident read and written atomically.
type atomicIdent struct{ v atomic.Uint64 }

func (a *atomicIdent) Load() ident   { return ident(a.v.Load()) }
func (a *atomicIdent) Store(w ident) { a.v.Store(uint64(w)) }

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

// atomicShut is a shutWord read and written atomically.
type atomicShut struct{ v atomic.Int64 }

func (a *atomicShut) Load() shutWord   { return shutWord(a.v.Load()) }
func (a *atomicShut) Store(w shutWord) { a.v.Store(int64(w)) }
