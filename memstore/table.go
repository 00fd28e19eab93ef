package memstore

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// hash returns key's hash: its top bits choose the shard, its low bits the
// slot. It is never 0, which marks an empty slot. A key of 8 to 32 bytes
// (an IPv4 address, most user IDs, a policy's key of a rule, a limit and
// an address) is two or four words mixed with the store's random keys by
// 64×64→128-bit multiplications, as the Go runtime's own hash does where
// the CPU has no AES instructions: a third of the instructions of
// maphash.String, which hashes every other key. Both are keyed per store,
// so a client cannot choose keys that collide.
func (s *Store) hash(key string) uint64 {
	n := len(key)
	switch {
	case n >= 8 && n <= 16:
		return nonZero(s.hashShort(key))
	case n < 8 || n > 32:
		return nonZero(maphash.String(s.seed, key))
	}
	b := unsafe.Slice(unsafe.StringData(key), n) // read only
	le := binary.LittleEndian
	h := mix(le.Uint64(b)^s.keys[1], le.Uint64(b[n-8:])^s.keys[2])
	h ^= mix(le.Uint64(b[8:])^s.keys[3], le.Uint64(b[n-16:])^s.keys[4])
	return nonZero(mix(s.keys[0]^uint64(n), h))
}

// hashShort is hash for a key of 8 to 16 bytes (the caller checks the
// length), but 0 where hash makes it 1 (once in 2^64 keys). It is small
// enough to inline into Take: the usual key costs no call. The two words
// are mixed with two of the store's keys, and the result with the length
// and a third: one mix alone leaves the product's structure in the result,
// so that keys that differ in a few digits (user:100000 and on) fall
// unevenly on the shards and slots for some of the store's keys.
// TestHashSpread holds it.
func (s *Store) hashShort(key string) uint64 {
	n := len(key)
	b := unsafe.Slice(unsafe.StringData(key), n) // read only
	return mix(mix(binary.LittleEndian.Uint64(b)^s.keys[1], binary.LittleEndian.Uint64(b[n-8:])^s.keys[2]), uint64(n)^s.keys[0])
}

// shardOf returns the index of the shard of hash h: its top bits. Shifting
// by 1 and then by 63 - bits keeps both amounts under 64 (one shard takes
// no bits), so the compiler needs no guard for larger ones.
func (s *Store) shardOf(h uint64) int {
	return int(h >> 1 >> (s.shift & 63))
}

// nonZero is h, or 1 for 0.
func nonZero(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// mix folds the 128-bit product of a and b into 64 bits.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// hashOf returns the hash of the entry's key: the table's place for it.
// Under the shard's lock or the slot's.
func (s *Store) hashOf(e *entry) uint64 {
	if e.id.Load().long() {
		return e.rest.Load()
	}
	var b [slotKey]byte
	kb := e.keyBytes(&b)
	return s.hash(unsafe.String(unsafe.SliceData(kb), len(kb)))
}

// table is an open-addressing hash table with linear probing whose slots
// are the entries: finding a key's state reads one cache line, its home
// slot, when it is there.
type table struct {
	slots []entry // a power of two of them
	// hints has one bit per slot: its entry, if in its home slot, had a
	// refusal word set when Take last decided it under its lock. Take
	// reads the word before the lock only then: reading it on a key that
	// two cores admit at once would fetch the line before the lock's
	// write fetches it again. It is only a hint: the word decides.
	hints []atomic.Uint64
}

func newTable(size int) *table {
	return &table{slots: make([]entry, size), hints: make([]atomic.Uint64, (size+63)/64)}
}

func (t *table) mask() uint64 { return uint64(len(t.slots) - 1) }

// hinted reports slot i's hint.
func (t *table) hinted(i uint64) bool { return t.hints[i/64].Load()>>(i%64)&1 != 0 }

// hint sets or clears slot i's hint. The slot's lock is held.
func (t *table) hint(i uint64, on bool) {
	if on {
		t.hints[i/64].Or(1 << (i % 64))
	} else {
		t.hints[i/64].And(^(1 << (i % 64)))
	}
}

// index returns e's slot index in t (e is one of t's slots).
func (t *table) index(e *entry) uint64 {
	return uint64((uintptr(unsafe.Pointer(e)) - uintptr(unsafe.Pointer(&t.slots[0]))) / unsafe.Sizeof(entry{}))
}

// shard is a part of the store with its own table. Lookups read the table
// without a lock; insertions, removals and growth take mu.
type shard struct {
	tab atomic.Pointer[table]
	_   [56]byte // tab is read on every decision, mu written on some: keep them apart

	mu    sync.Mutex
	n     int    // entries in the table
	hand  uint64 // the eviction hand: the next slot it examines
	sweep uint64 // where the sweeper resumes
	// floor is the latest time the sweeper removed keys at: a key it
	// removed as fresh then must not be decided again at an earlier
	// time, when it may not have been.
	floor int64
	// limits shares one compiled limit among the shard's entries of that
	// limit, at most maxShared of them (an entry of any other limit gets
	// its own): entries stay small, and the parameters every decision
	// reads stay in cache however many keys there are.
	limits map[sluice.Limit]*compiled
	// last is the shared limit compile returned last: a spray of new keys
	// under one limit finds it without hashing the limit.
	last *compiled
	// seed2 keys the second hash of a key longer than a slot holds (the
	// store's, in every shard).
	seed2 maphash.Seed
	_     [64]byte // keep shards' locks on separate cache lines
}

// maxShared bounds a shard's shared limits. An application has a few
// limits; one computed from client input (a header's scale, say) could
// have many, and they must not grow the table.
const maxShared = 64

// compile returns lim compiled: the shard's shared copy, or a new one
// (shared from now on while there is room). The shard's lock is held.
func (sh *shard) compile(lim *sluice.Limit) (*compiled, error) {
	if c := sh.last; c != nil && sameLimit(&c.lim, lim) {
		return c, nil
	}
	if c := sh.limits[*lim]; c != nil {
		sh.last = c
		return c, nil
	}
	p, err := algo.Compile(*lim)
	if err != nil {
		return nil, err
	}
	c := &compiled{lim: *lim, p: p}
	if len(sh.limits) < maxShared {
		sh.limits[*lim] = c
		sh.last = c
	}
	return c, nil
}

// changedLimits shares the compiled limits that entries' states are
// carried over to (Store.params), as a shard's limits does for new entries,
// so that a changed limit costs each of its keys no copy of its own. Its
// lock is taken under an entry's and takes no other.
type changedLimits struct {
	mu sync.Mutex
	m  map[sluice.Limit]*compiled // at most maxShared
}

func (cl *changedLimits) compile(lim sluice.Limit) (*compiled, error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if c := cl.m[lim]; c != nil {
		return c, nil
	}
	p, err := algo.Compile(lim)
	if err != nil {
		return nil, err
	}
	c := &compiled{lim: lim, p: p}
	if cl.m == nil {
		cl.m = make(map[sluice.Limit]*compiled)
	}
	if len(cl.m) < maxShared {
		cl.m[lim] = c
	}
	return c, nil
}

// probe returns the entry of key (packed as w0, w1 for hash h) under the
// identity of lim in t, or nil; a dead one instead if dead. The shard's
// lock is held: what the slots hold does not change.
func (t *table) probe(h uint64, w0 ident, w1 uint64, lim *sluice.Limit, dead bool) *entry {
	slots := t.slots
	mask := uint64(len(slots) - 1)
	if dead {
		w0 |= idDead
	}
	for i, n := h&mask, 0; n < len(slots); i, n = (i+1)&mask, n+1 {
		e := &slots[i]
		if !e.live() {
			return nil
		}
		if e.holds(w0, w1) {
			if found, _ := e.is(lim); found {
				return e
			}
		}
	}
	return nil
}

// find returns the live entry of key under lim, locked, or nil if it did
// not find one without the shard's lock (the caller then looks again
// under it); exact if its state is kept under lim itself (otherwise under
// another limit of the same identity). It compares the identity without
// the slot's lock and again under it: what a slot holds may change
// meanwhile.
func (t *table) find(h uint64, w0 ident, w1 uint64, lim *sluice.Limit) (e *entry, exact bool) {
	slots := t.slots
	mask := uint64(len(slots) - 1)
	for i, n := h&mask, 0; n < len(slots); i, n = (i+1)&mask, n+1 {
		e := &slots[i]
		i0 := e.id.Load()
		if i0.empty() {
			return nil, false // empty, or changing: the caller looks again under the shard's lock
		}
		if i0.name() != w0 || e.rest.Load() != w1 {
			continue
		}
		e.mu.Lock()
		if e.holds(w0, w1) {
			if found, exact := e.is(lim); found {
				return e, exact
			}
		}
		e.mu.Unlock()
	}
	return nil, false
}

// lookup returns the entry of key under lim, or nil. The shard's lock is
// held.
func (sh *shard) lookup(h uint64, key string, lim *sluice.Limit) *entry {
	w0, w1 := sh.pack(key, h)
	return sh.tab.Load().probe(h, w0, w1, lim, false)
}

// pack is packKey for a key of sh.
func (sh *shard) pack(key string, h uint64) (w0 ident, w1 uint64) {
	if len(key) <= slotKey {
		return packShort(key)
	}
	return packKey(key, h, maphash.String(sh.seed2, key))
}

// insert makes a slot of sh hold key (hash h) under c, fresh, evicting
// first while the shard is at its bound, and returns it locked. The
// shard's lock is held.
func (s *Store) insert(sh *shard, h uint64, key string, c *compiled) *entry {
	for sh.n >= s.perShard && s.evictOne(sh) {
	}
	t := sh.tab.Load()
	if 4*(sh.n+1) > 3*len(t.slots) {
		t = s.grow(sh, t)
	}
	e := t.empty(h)
	e.mu.Lock()
	w0, w1 := sh.pack(key, h)
	e.setIdentity(w0, w1, c, newCold(c))
	sh.n++
	return e
}

// empty returns the first empty slot of h's probe sequence. The shard's
// lock is held.
func (t *table) empty(h uint64) *entry {
	mask := t.mask()
	i := h & mask
	for t.slots[i].live() {
		i = (i + 1) & mask
	}
	return &t.slots[i]
}

// grow replaces t with a table twice its size, emptying t's slots as it
// moves them: a reader that locks one finds it empty and looks again under
// the shard's lock.
func (s *Store) grow(sh *shard, t *table) *table {
	g := newTable(2 * len(t.slots))
	for i := range t.slots {
		e := &t.slots[i]
		if !e.live() {
			continue
		}
		e.mu.Lock()
		g.empty(s.hashOf(e)).moveFrom(e)
		e.mu.Unlock()
	}
	sh.tab.Store(g)
	return g
}

// evictOne removes one entry by CLOCK (second chance): the hand walks the
// table, a used entry loses its flag, the first unused one is evicted.
// A hit only sets the entry's own flag, so a decision writes nothing
// outside its entry. It reports false when every entry is pinned. The
// shard's lock is held.
func (s *Store) evictOne(sh *shard) bool {
	t := sh.tab.Load()
	for range 2*len(t.slots) + 1 {
		i := sh.hand & t.mask()
		sh.hand++
		e := &t.slots[i]
		if !e.live() || e.pinned() {
			continue
		}
		// The hand stays past i after an eviction: an entry moved back
		// into i waits for the next pass, as in an insertion-ordered
		// list a newer entry would.
		e.mu.Lock()
		if e.used() {
			e.unuse()
			e.mu.Unlock()
			continue
		}
		s.removeAt(sh, t, i)
		return true
	}
	return false
}

// removeAt empties slot i, which is locked, moving back the entries after
// it that probing would no longer reach (backward-shift deletion, so no
// tombstones), and unlocks it. Each move holds both slots' locks. A reader
// probing meanwhile may miss a moving entry, never find a wrong one. The
// shard's lock is held.
func (s *Store) removeAt(sh *shard, t *table, i uint64) {
	mask := t.mask()
	t.slots[i].clear()
	t.hint(i, false)
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		e := &t.slots[j]
		if !e.live() {
			break
		}
		// The entry at j stays if its home slot lies cyclically in (i, j].
		if home := s.hashOf(e) & mask; (j-home)&mask < (j-i)&mask {
			continue
		}
		e.mu.Lock()
		t.slots[i].moveFrom(e)
		t.hint(j, false)
		t.slots[i].mu.Unlock()
		i = j
	}
	t.slots[i].mu.Unlock()
	sh.n--
}

// sameLimit is *a == *b, field by field: the generated comparison calls
// the general memory comparison. TestSameLimitCoversLimit fails when
// sluice.Limit gains a field this does not compare.
func sameLimit(a, b *sluice.Limit) bool {
	return a.Count == b.Count && a.Period == b.Period && a.Algorithm == b.Algorithm &&
		a.Burst == b.Burst && a.NoDelay == b.NoDelay && a.Warmup == b.Warmup && a.LeaseTTL == b.LeaseTTL &&
		a.Calendar == b.Calendar && a.Version == b.Version && sameZone(a.Zone, b.Zone)
}

// sameZone is a == b without a call to the general comparison when both
// are empty (no calendar, the usual case). Small enough that sameLimit
// stays inlined.
func sameZone(a, b string) bool {
	return len(a) == len(b) && (len(a) == 0 || a == b)
}
