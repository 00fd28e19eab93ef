package memstore

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"sync/atomic"
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

// newCold returns a cold part for an entry under c, or nil if its
// algorithm's state is X, Y and Idle alone.
func newCold(c *compiled) *cold {
	switch c.lim.Algorithm {
	case sluice.AlgorithmSlidingWindow:
		return &cold{}
	case sluice.AlgorithmSlidingLog, sluice.AlgorithmConcurrency:
		l := &coldLog{}
		l.hasLog = true
		return &l.cold
	}
	return nil
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

// compiled is a limit and its parameters.
type compiled struct {
	lim sluice.Limit
	p   algo.Params
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
