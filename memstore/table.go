package memstore

import (
	"encoding/binary"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// inlineKey is the longest key an entry holds in itself: its first
// headKey bytes on the entry's first cache line, the rest on the second.
// A longer key is held in a string of its own.
const (
	headKey   = 13
	inlineKey = headKey + 15
)

// entry is the state of one (key, limit), 128 bytes: two whole cache lines
// (the allocator places objects of that size class on multiples of 128
// bytes). The first holds what nearly every decision reads and writes: the
// entry's lock, what finding it compares (a key of up to headKey bytes),
// the state of the buckets and the fixed window (st.X, st.Y, st.Idle) and
// the word that refuses without the lock (shut). The second holds the rest of the state (the sliding window's
// st.Z, the logs) and of a longer key, and what only insertions, evictions
// and sweeps read. A token bucket, GCRA, leaky bucket or fixed window
// decision on a key such as an IPv4 address or "user:123456" touches one
// line; TestEntryLayout holds the offsets.
type entry struct {
	mu sync.Mutex // guards used, dead and st, and writes to shut and c

	// shut is algo.Closed's word for st, published under mu (Store.publish),
	// so that a request of cost 1 the state refuses is refused without
	// taking mu (Store.refuse). It is 0 while the state admits one, while
	// the entry is not marked used and once it is dead; shutChanged for
	// good once its limit has changed (params), so that what a reader
	// without mu reads of c belongs with what it reads of shut; and -t
	// after a decision at the exact time t, until the coarse reading
	// passes it (Store.markAhead).
	shut atomic.Int64

	// c is the limit and parameters its state is kept under (shared, read
	// only). It changes, under mu, when a request brings another limit of
	// the same identity (Store.params); its identity, which lookups
	// compare without mu, never does.
	c    atomic.Pointer[compiled]
	klen int8 // length of the key in head and tail, or -1: the key is in long
	used bool // used since the eviction hand or the sweeper last passed it
	dead bool // removed from the table: a caller that found it looks again
	head [headKey]byte

	st algo.State // X, Y and Idle on the first line, the rest on the second

	long   *string // the key, if longer than inlineKey
	tail   [inlineKey - headKey]byte
	pinned bool // held by a TakeAll; not evictable (guarded by the shard lock)
}

// is reports whether e is the state of key under lim: of key, with the
// identity of lim (sluice.Limit.Shares); exact if its state is kept under
// lim itself. What it reads never changes once e is in a table (e.c may
// change, never its identity), so it needs no lock, but exact is only
// stable under e's lock.
func (e *entry) is(key string, lim *sluice.Limit) (found, exact bool) {
	if !e.hasKey(key) {
		return false, false
	}
	c := e.c.Load()
	if sameLimit(&c.lim, lim) {
		return true, true
	}
	return c.lim.Algorithm == lim.Algorithm && c.lim.Version == lim.Version, false
}

// hasKey reports whether e's key is key. What it reads never changes once
// e is in a table.
func (e *entry) hasKey(key string) bool {
	n := len(key)
	switch {
	case int(e.klen) != n:
		return e.klen < 0 && *e.long == key
	case n <= headKey:
		return inlineEqual(e.head[:], key)
	}
	return inlineEqual(e.head[:], key[:headKey]) && string(e.tail[:n-headKey]) == key[headKey:]
}

// splitHas reports whether e's key, held in e itself past its first line
// (klen from headKey+1 to inlineKey, checked by the caller), is key: its
// first headKey bytes on the entry's first line, the rest on its second.
// An IPv4 address of 14 or 15 characters, or a policy's key of a rule, a
// limit and an address, is one or two word compares per line. Not inlined
// (two inlineEquals exceed the budget): a key of up to headKey bytes is
// compared inline by its caller.
func (e *entry) splitHas(key string) bool {
	return inlineEqual(e.head[:], key[:headKey]) && inlineEqual(e.tail[:], key[headKey:])
}

// inlineEqual reports whether the first len(key) bytes of b are key,
// comparing 8 bytes at a time (the last word overlapping the one before)
// when key is 8 to 16 bytes long: an 11-byte key is two loads of each, not
// a call to the general comparison.
func inlineEqual(b []byte, key string) bool {
	n := len(key)
	if uint(n-8) > 8 || n > len(b) { // n < 8 too
		return string(b[:n]) == key
	}
	k := unsafe.Slice(unsafe.StringData(key), n) // read only
	le := binary.LittleEndian
	x := le.Uint64(b[n-8:]) ^ le.Uint64(k[n-8:])
	if n > 8 {
		x |= le.Uint64(b[0:]) ^ le.Uint64(k[0:])
	}
	return x == 0
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

// key returns the entry's key.
func (e *entry) key() string {
	n := int(e.klen)
	switch {
	case n < 0:
		return *e.long
	case n <= headKey:
		return string(e.head[:n])
	}
	return string(e.head[:]) + string(e.tail[:n-headKey])
}

// unuse clears e's used flag, and with it the word that refuses without
// the lock: the next request takes the lock, which marks e used again, so
// that the eviction hand and the sweeper see refused keys as used. e's
// lock is held.
func (e *entry) unuse() {
	e.used = false
	if e.shut.Load() > 0 {
		e.shut.Store(0)
	}
}

// kill marks e removed from its table: a caller that found it looks again,
// and nothing is refused without the lock by a state no longer held. e's
// lock is held.
func (e *entry) kill() {
	e.dead = true
	if e.shut.Load() > 0 {
		e.shut.Store(0)
	}
}

func newEntry(key string, c *compiled) *entry {
	e := &entry{klen: int8(len(key))}
	e.c.Store(c)
	if len(key) <= inlineKey {
		n := copy(e.head[:], key)
		copy(e.tail[:], key[n:])
	} else {
		long := strings.Clone(key)
		e.klen, e.long = -1, &long
	}
	return e
}

// shutChanged is entry.shut once the entry's limit has changed.
const shutChanged = -1

// compiled is a limit and its parameters.
type compiled struct {
	lim sluice.Limit
	p   algo.Params
}

// slot is one place of a table: an entry and the hash of its key. Readers
// load both without the shard's lock, so each is written atomically.
type slot struct {
	h atomic.Uint64 // 0: empty; its top bit flipped: the entry refuses (closedHint)
	e atomic.Pointer[entry]
}

// closedHint, flipped in a slot's hash, says that its entry, if in its home
// slot, had a word that refuses (entry.shut) when Take last decided it under
// its lock. Take reads the word only then: the slot's line is read on every
// decision anyway and written almost never, while reading the word on a
// key that two cores admit at once would fetch the entry's line before its
// lock's write fetches it again (measured: a sixth of the time of one key
// admitted from two goroutines). It is only a hint: the word decides.
const closedHint = 1 << 63

// sameHash reports whether a slot holding stored holds hash h, hint or not.
func sameHash(stored, h uint64) bool {
	return (stored^h)&^closedHint == 0
}

// table is an open-addressing hash table with linear probing. Looking an
// entry up reads the line of its slot, then the entry itself: two cache
// lines where a Go map reads its control word, its slot and the entry.
type table struct {
	slots []slot // a power of two of them
}

func newTable(size int) *table {
	return &table{slots: make([]slot, size)}
}

func (t *table) mask() uint64 { return uint64(len(t.slots) - 1) }

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
	_    [64]byte // keep shards' locks on separate cache lines
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

// probe returns the entry of key under lim in t, or nil. Without the
// shard's lock it may miss an entry that a concurrent removal is moving,
// or return one that has just been removed (its dead flag says so); under
// the lock it is exact.
func (t *table) probe(h uint64, key string, lim *sluice.Limit) *entry {
	slots := t.slots
	mask := uint64(len(slots) - 1)
	for i, n := h&mask, 0; n < len(slots); i, n = (i+1)&mask, n+1 {
		sl := &slots[i]
		if sh := sl.h.Load(); sameHash(sh, h) {
			if e := sl.e.Load(); e != nil {
				if found, _ := e.is(key, lim); found {
					return e
				}
			}
		} else if sh == 0 {
			return nil
		}
	}
	return nil
}

// home returns the entry in the home slot of hash h if that slot holds h,
// or nil, and whether the slot carries closedHint: where Take looks first,
// inline.
func (t *table) home(h uint64) (e *entry, hinted bool) {
	sl := &t.slots[h&uint64(len(t.slots)-1)]
	x := sl.h.Load() ^ h
	if x&^closedHint != 0 {
		return nil, false
	}
	return sl.e.Load(), x != 0
}

// hint sets or clears closedHint in the home slot of hash h, if that slot
// still holds h. A hash of exactly closedHint never carries it: the slot
// would read as empty.
func (t *table) hint(h uint64, closed bool) {
	sl := &t.slots[h&uint64(len(t.slots)-1)]
	old := sl.h.Load()
	if !sameHash(old, h) || h == closedHint {
		return
	}
	want := h
	if closed {
		want ^= closedHint
	}
	sl.h.CompareAndSwap(old, want)
}

// find returns the live entry of key under lim, locked, or nil if it did
// not find one without the shard's lock (the caller then looks again
// under it); exact if its state is kept under lim itself (otherwise under
// another limit of the same identity). It locks an entry whose hash matches before it compares the
// key: the first touch of the entry's first cache line is then the lock's
// write, not a read that another core's lock must take back at once.
func (t *table) find(h uint64, key string, lim *sluice.Limit) (e *entry, exact bool) {
	slots := t.slots
	mask := uint64(len(slots) - 1)
	for i, n := h&mask, 0; n < len(slots); i, n = (i+1)&mask, n+1 {
		sl := &slots[i]
		if sh := sl.h.Load(); sameHash(sh, h) {
			if e := sl.e.Load(); e != nil {
				e.mu.Lock()
				// A dead entry was removed after it was found; the key's
				// state, if any, is further on or only under the lock.
				if !e.dead {
					// is's usual case written out (inlineEqual and
					// sameLimit inline here, is itself does not): a
					// key on the entry's first line, under lim itself.
					if n := len(key); n <= headKey && int(e.klen) == n && inlineEqual(e.head[:], key) && sameLimit(&e.c.Load().lim, lim) {
						return e, true
					}
					if found, exact := e.is(key, lim); found {
						return e, exact
					}
				}
				e.mu.Unlock()
			}
		} else if sh == 0 {
			return nil, false
		}
	}
	return nil, false
}

// lookup returns the entry of key under lim, or nil. The shard's lock is
// held.
func (sh *shard) lookup(h uint64, key string, lim *sluice.Limit) *entry {
	return sh.tab.Load().probe(h, key, lim)
}

// insert adds e, whose key hashes to h, evicting first while the shard is
// at its bound. The shard's lock is held.
func (sh *shard) insert(h uint64, e *entry, bound int) {
	for sh.n >= bound && sh.evictOne() {
	}
	t := sh.tab.Load()
	if 4*(sh.n+1) > 3*len(t.slots) {
		t = sh.grow(t)
	}
	t.put(h, e)
	sh.n++
}

// put stores e in the first empty slot of its probe sequence. The entry is
// stored before the hash, so a reader that sees the hash sees the entry.
func (t *table) put(h uint64, e *entry) {
	mask := t.mask()
	i := h & mask
	for t.slots[i].h.Load() != 0 {
		i = (i + 1) & mask
	}
	t.slots[i].e.Store(e)
	t.slots[i].h.Store(h)
}

// grow replaces t with a table twice its size. Readers still probing t find
// what it held, or miss and look again under the lock.
func (sh *shard) grow(t *table) *table {
	g := newTable(2 * len(t.slots))
	for i := range t.slots {
		if h := t.slots[i].h.Load(); h != 0 {
			g.put(h, t.slots[i].e.Load())
		}
	}
	sh.tab.Store(g)
	return g
}

// evictOne removes one entry by CLOCK (second chance): the hand walks the
// table, a used entry loses its flag, the first unused one is evicted.
// A hit only sets the entry's own flag, so a decision writes nothing
// outside its entry. It reports false when every entry is pinned. The
// shard's lock is held.
func (sh *shard) evictOne() bool {
	t := sh.tab.Load()
	for range 2*len(t.slots) + 1 {
		i := sh.hand & t.mask()
		sh.hand++
		e := t.slots[i].e.Load()
		if e == nil || e.pinned {
			continue
		}
		// The hand stays past i after an eviction: an entry moved back
		// into i waits for the next pass, as in an insertion-ordered
		// list a newer entry would.
		e.mu.Lock()
		if e.used {
			e.unuse()
			e.mu.Unlock()
			continue
		}
		e.kill()
		e.mu.Unlock()
		sh.removeAt(t, i)
		return true
	}
	return false
}

// remove takes e, whose key hashes to h, out of the table. The shard's
// lock and e's lock are held.
func (sh *shard) remove(h uint64, e *entry) {
	e.kill()
	t := sh.tab.Load()
	mask := t.mask()
	for i := h & mask; t.slots[i].h.Load() != 0; i = (i + 1) & mask {
		if t.slots[i].e.Load() == e {
			sh.removeAt(t, i)
			return
		}
	}
}

// removeAt empties slot i, moving back the entries after it that probing
// would no longer reach (backward-shift deletion, so no tombstones). A
// reader probing meanwhile may miss a moving entry, never find a wrong one.
func (sh *shard) removeAt(t *table, i uint64) {
	mask := t.mask()
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		h := t.slots[j].h.Load()
		if h == 0 {
			break
		}
		// The entry at j stays if its home slot lies cyclically in (i, j].
		if home := h & mask; (j-home)&mask < (j-i)&mask {
			continue
		}
		t.slots[i].e.Store(t.slots[j].e.Load())
		t.slots[i].h.Store(h)
		i = j
	}
	t.slots[i].h.Store(0)
	t.slots[i].e.Store(nil)
	sh.n--
}
