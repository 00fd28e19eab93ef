// Package memstore is the in-process sluice.Store, the default for a single
// instance: no network, no allocation per decision for a key it already
// holds, and a hard bound on the number of keys.
//
// State lives in a sharded hash table that decisions read without a lock,
// whose 64-byte slots are the entries: a decision on a key in its home slot
// reads and writes one cache line. Each (key, limit) has its own mutex, so
// decisions on different keys never wait for each other, and each shard
// has its own for insertions and removals. Time is read from the
// monotonic clock (anchored to the wall clock once, at New), so a wall
// clock step never changes a decision; by default a background goroutine
// reads it once per millisecond and decisions use that reading
// (Config.Resolution says what that trades).
// A decision reads the time with its key's lock held, so a request that
// waited for the lock is not decided as of a stale reading (which could
// refuse what the decisions it waited for had made room for). A request
// of cost 1 that a token_bucket or gcra key refuses is refused without
// taking its lock, by a word the key publishes when it refuses: under a
// flood of refused requests the key is only read, so it stays in every
// core's cache.
//
// Memory is bounded by Config.MaxKeys. When a shard is full, a key not used
// since the eviction hand last passed it is forgotten (CLOCK, a close
// approximation of least recently used): it starts fresh the next time it is
// seen (an empty window, a full bucket), which admits more for that key than
// remembering it would have. Hot keys are used between passes, so an
// attacker spraying distinct keys evicts other idle keys, not the ones under
// load. Keys whose state has returned to fresh and that have not been used
// since the previous sweep are removed in the background.
//
// What eviction means for the guarantee: an evicted key's limit restarts,
// so a client able to send more distinct keys than MaxKeys between two of
// its own requests (many source addresses, or a header it controls) can
// have its exhausted key forgotten and be admitted again. Size MaxKeys above
// the number of distinct keys a store sees within the longest window of its
// limits, and eviction never happens to a key still inside its window; the
// memory that costs is MaxKeys times the bytes per key.
//
// Each key costs about 150 bytes, whatever its length (a key of up to 13
// bytes is held in its slot, a longer one as two independent hashes of
// it): about 175 for the sliding window, 240 for the sliding log and
// concurrency, and 24 more per further logged request or lease
// (TestBytesPerKey; docs/operations.md has the table).
//
// # Concurrency protocol
//
// This section is for those who change the package: the protocol told as
// a whole, in one place (the comments at each step say only what that
// step does). The files follow it:
//
//	slot.go      an entry (a slot): its packed words (ident, shutWord), identity
//	             changes, the read without the lock (peek, still, refuse) and
//	             the publication of the refusal word (publish)
//	clock.go     the time of a decision: the coarse clock (reading, now, raise,
//	             the ticker) and the marks of decisions at the exact time
//	             (timeOf, markAhead, recheck)
//	table.go     the hash, shards and tables: finding a key without the
//	             shard's lock (find), insertion, growth, eviction, removal
//	takeall.go   TakeAll: every shard's and entry's lock at once
//	sweep.go     the background removal of keys back to fresh
//	memstore.go  the Store, Take and its slower paths, Release, Reset
//	adjust.go    Adjust
//
// Locks, in the order they are taken:
//
//  1. shard.mu, of one shard, or of several in ascending index (TakeAll
//     alone holds more than one).
//  2. entry.mu, a slot's lock. A goroutine holds more than one only while
//     it holds the locks of all their shards: removeAt (the slot it empties
//     and the next one it moves back into it) and TakeAll (every entry of
//     its requests). grow holds the old slot's alone (the new table is not
//     yet visible); Take, Adjust and Release hold one at a time: find
//     unlocks a slot before it tries the next.
//  3. changedLimits.mu, taken under an entry's; it takes no other.
//
// The coarse clock (Store.coarse), the hints (table.hints), the lease
// counter and Store.closed are atomics written under no lock.
//
// Which field is written under which lock, and who reads it without one:
//
//	field                                   written under                   read without a lock by
//	shard.tab                               shard.mu (grow)                 every decision (find)
//	shard.n, hand, sweep, floor, limits     shard.mu                        nobody
//	entry.id and rest, and ref, when the    the slot's and the shard's      find; refuse (peek, still)
//	  identity changes (setIdentity)
//	entry.id's used flag (setFlags)         the slot's                      find, peek (ignored: not part of the name)
//	entry.id's pinned and dead flags        the slot's and the shard's      find, peek (dead is part of the name)
//	entry.ref when the limit changes        the slot's (params)             peek, only a ref without a cold part,
//	                                                                        and only under a refusing word
//	cold.c (the limit of a cold part)       the slot's (params)             lookup, under the shard's lock alone
//	entry.x, y, idle; cold.z and the log    the slot's                      nobody
//	entry.shut (shutWord)                   the slot's                      Take (the hinted check), refuse
//	table.hints                             the slot's                      Take
//	Store.coarse (reading)                  none: compare-and-swap          every decision (Store.now)
//
// The packed words, each a named type whose comment has its table of
// states: ident (entry.id: the key's length, the flags, the generation
// and key bytes), shutWord (entry.shut: open, refusing, changed or ahead)
// and reading (Store.coarse: read, unread or asleep). entry.ref points at
// a *compiled, or one byte into a *cold (hasCold), so that one atomic
// load tells which.
//
// Reading a slot without its lock (Store.refuse, for a request of cost 1
// on a key that refuses it): load shut, which must be refusing; load id,
// whose name must be the key's, and rest; load ref, which must have no
// cold part and the request's limit; read the clock; load shut again,
// which must be equal; load id again, which must show the same even
// generation (ident.sameRead). What makes the answer the one the lock
// would give:
//
//   - An identity change (setIdentity) opens the word before it makes the
//     generation odd, and makes it even again only after the new identity
//     and limit are written: two equal loads of an even generation read one
//     occupant, and a refusing word read between them was published by it.
//   - A limit change (params) marks the word changed before it changes
//     ref, and a changed word is never refusing again for that occupant.
//   - Every change to the state under the lock while the word is refusing
//     republishes the word or opens it (publish), so a refusing word is the
//     state's own. An admission that leaves the word open is always right:
//     the next request takes the lock.
//   - The clock is read after the first load of the word, and every time
//     read under a slot's lock is no earlier than the one before it
//     (Store.now); after a decision at the exact time the word is ahead,
//     not refusing, until the coarse reading has passed that time
//     (markAhead), so refuse never answers as of a time before one the key
//     was decided at. With a coarse clock, refuse answers only a second
//     (recheckBelow) or more before the word's time, where the lock's path
//     would refuse as of the coarse reading without deciding again at the
//     exact time (recheck).
//   - A word is refusing only on an entry marked used, and the flag and
//     the word are cleared together (unuse), so a key refused without its
//     lock is kept from eviction as one decided under it.
//
// TestSlotInterleavings (build tag sluicehooks: go test -race -tags
// sluicehooks -run '^TestSlot' ./memstore) runs every interleaving of one
// identity change with one such read; TestSlotIdentityIsOneOccupant and
// TestRefuseIsTheLockedDecision hold it under load.
//
// Finding a key without the shard's lock (find): it compares the identity
// without the slot's lock, then locks the slot and compares again. A slot
// being moved or changed reads as empty (length 0), which ends the probe:
// the caller looks again under the shard's lock, where no identity
// changes. Removal moves entries back (backward-shift deletion) holding
// both slots' locks, so a probe may miss a moving entry, never find a
// wrong one.
//
// Take's usual path (Store.take) writes find's home-slot case, decide and
// timeOf out by hand, and adds the hint: one bit per slot (table.hints)
// set when the word was refusing at Take's last decision under the lock,
// so that Take reads the word before the lock only then (reading it on a
// key two cores admit at once would fetch the line twice). The hint only
// chooses the order; the word decides. TestTakeFastPathIsGeneric holds
// this path to the generic one (find, takeChanged, decide): the same
// decisions and the same state over random traffic.
package memstore
