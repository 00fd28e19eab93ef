// Package memstore is the in-process sluice.Store, the default for a single
// instance: no network, no allocation per decision for a key it already
// holds, and a hard bound on the number of keys.
//
// State lives in a sharded hash table; each shard has its own mutex and
// eviction list, so there is no global lock on the hot path and decisions on
// different keys rarely contend. Time is read from the
// monotonic clock (anchored to the wall clock once, at New), so a wall clock
// step never changes a decision, and a reading that is stale by the time its
// decision is made (the goroutine waited between the two) decides at the
// latest time already used, never at an earlier one that would refuse what
// that time had made room for.
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
// Each key costs about 216 bytes with a key of up to 32 bytes, for every
// algorithm (TestBytesPerKey; docs/operations.md has the table); a longer
// key adds its length, a sliding_log key about 24 bytes per logged
// request, a concurrency key per lease.
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// Config configures a Store. The zero value is ready to use; each field
// documents its default.
type Config struct {
	// MaxKeys bounds how many (key, limit) states are held. Default
	// 100,000 (about 22 MB with IPv4 keys; docs/operations.md says how to
	// size it). The bound is enforced per shard, so the total can exceed
	// MaxKeys by less than the number of shards.
	MaxKeys int

	// Shards is the number of independently locked shards, rounded up to a
	// power of two. Default 64, fewer for a small MaxKeys (each shard holds
	// at least 16 keys).
	Shards int

	// SweepInterval is how often keys whose state has returned to fresh
	// are removed in the background. Default 1s; negative disables the
	// sweeper (keys are then only removed by eviction).
	SweepInterval time.Duration

	// Resolution, if positive, makes the store read the clock once per
	// Resolution (in a background goroutine) instead of on every decision,
	// which saves a clock read (20-30 ns on a virtual machine) per
	// decision. Decisions are then made as of the last reading, up to one
	// Resolution late: never more admissions, but those a refill allows can
	// come in bunches at each reading. Keep it well below the interval of
	// the fastest limit (1ms is fine for limits up to about 100/s per key).
	// Default 0: exact time on every decision.
	Resolution time.Duration

	// Now replaces the clock, for tests. Its readings are used as they
	// are, even one earlier than a time already used (to test what the
	// algorithms do when a clock goes back). Default: the monotonic clock,
	// reported as wall time anchored at New.
	Now func() time.Time
}

// Store is an in-process sluice.Store. It is safe for concurrent use. Close
// it to stop its background sweeper.
type Store struct {
	shards   []shard
	mask     uint64
	perShard int
	seed     maphash.Seed
	given    bool // the clock is Config.Now: its readings are used as they are
	base     time.Time
	baseUS   int64
	clock    func() time.Time
	leases   atomic.Uint64
	coarse   atomic.Int64 // the last reading, µs, when Resolution > 0
	ticking  bool
	closed   atomic.Bool
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

var _ sluice.Store = (*Store)(nil)

type shard struct {
	mu sync.Mutex
	// last is the latest time (µs) a decision in this shard was made at,
	// with the store's own clock: a reading older than that (its goroutine
	// was descheduled between the reading and the lock) decides at last.
	last int64
	m    map[uint64]*entry
	lru  entry // sentinel: lru.next is the most recently used
	n    int
	// limits shares one compiled limit among the shard's entries of that
	// limit, at most maxShared of them (an entry of any other limit gets
	// its own): entries stay small, and the parameters every decision
	// reads stay in cache however many keys there are.
	limits map[sluice.Limit]*compiled
	_      [64]byte // keep shards' locks on separate cache lines
}

// compiled is a limit and its parameters.
type compiled struct {
	lim sluice.Limit
	p   algo.Params
}

// maxShared bounds a shard's shared limits. An application has a few
// limits; one computed from client input (a header's scale, say) could
// have many, and they must not grow the table.
const maxShared = 64

// inlineKey is the longest key an entry holds in its own first cache line;
// a longer key is held in a string of its own.
const inlineKey = 32

// entry is the state of one (key, limit), 192 bytes: three whole cache
// lines (the allocator places objects of that size class on multiples of
// 192 bytes). Finding the entry reads the first line; a decision then
// reads and writes the second; the third is touched only on insertion,
// eviction and sweeps. (Entries used to hold the limit and its parameters
// themselves: 320 bytes over up to six lines, and with 100,000 keys each
// decision waited on about twice the cache misses.)
type entry struct {
	chain  *entry    // next entry with the same hash
	c      *compiled // its limit and parameters (shared, read only)
	hash   uint64
	klen   int8 // length of the key in kbuf, or -1: the key is in long
	used   bool // used since it last passed the eviction hand or the sweeper
	pinned bool // in use by a TakeAll; not evictable
	kbuf   [inlineKey]byte

	st algo.State

	prev, next *entry // eviction list
	long       string
	_          [32]byte // pad to 192 bytes (TestEntryLayout)
}

// is reports whether e is the state of key.
func (e *entry) is(key string) bool {
	if e.klen < 0 {
		return e.long == key
	}
	return int(e.klen) == len(key) && string(e.kbuf[:e.klen]) == key
}

// compile returns lim compiled: the shard's shared copy, or a new one
// (shared from now on while there is room).
func (sh *shard) compile(lim sluice.Limit) (*compiled, error) {
	if c := sh.limits[lim]; c != nil {
		return c, nil
	}
	p, err := algo.Compile(lim)
	if err != nil {
		return nil, err
	}
	c := &compiled{lim: lim, p: p}
	if len(sh.limits) < maxShared {
		sh.limits[lim] = c
	}
	return c, nil
}

// sweepBudget is how many entries a sweep examines per shard, from the
// oldest end of the eviction list, where idle keys gather.
const sweepBudget = 1024

// New returns a Store configured by cfg, and starts its sweeper.
func New(cfg Config) (*Store, error) {
	if cfg.MaxKeys < 0 {
		return nil, fmt.Errorf("memstore: MaxKeys must not be negative (got %d)", cfg.MaxKeys)
	}
	if cfg.Shards < 0 {
		return nil, fmt.Errorf("memstore: Shards must not be negative (got %d)", cfg.Shards)
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = 100_000
	}
	if cfg.Shards == 0 {
		cfg.Shards = min(64, max(1, cfg.MaxKeys/16))
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = time.Second
	}
	n := 1 << bits.Len(uint(cfg.Shards-1))
	s := &Store{
		shards:   make([]shard, n),
		mask:     uint64(n - 1),
		perShard: (cfg.MaxKeys + n - 1) / n,
		seed:     maphash.MakeSeed(),
		base:     time.Now(),
		clock:    cfg.Now,
		given:    cfg.Now != nil,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	s.baseUS = s.base.UnixMicro()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.m = make(map[uint64]*entry)
		sh.limits = make(map[sluice.Limit]*compiled)
		sh.lru.next, sh.lru.prev = &sh.lru, &sh.lru
	}
	if cfg.Resolution < 0 {
		return nil, fmt.Errorf("memstore: Resolution must not be negative (got %s)", cfg.Resolution)
	}
	if cfg.Resolution > 0 && cfg.Now == nil {
		s.ticking = true
		s.coarse.Store(s.readClock())
	}
	if cfg.SweepInterval > 0 || s.ticking {
		go s.background(cfg.SweepInterval, cfg.Resolution)
	} else {
		close(s.done)
	}
	return s, nil
}

// now returns the store's time in µs since the Unix epoch.
func (s *Store) now() int64 {
	if s.ticking {
		return s.coarse.Load()
	}
	return s.readClock()
}

func (s *Store) readClock() int64 {
	if s.clock != nil {
		return s.clock().UnixMicro()
	}
	return s.baseUS + int64(time.Since(s.base)/time.Microsecond)
}

// at returns the time to decide at in sh, whose lock is held, given a
// reading of the clock: the reading, or with the store's own clock the
// latest time already used in sh if that is later. The monotonic clock
// never goes back, so a reading older than one already used is stale (its
// goroutine waited between the reading and the lock), and deciding at it
// would refuse what an earlier decision's time had already made room for.
// Config.Now's readings are used as they are: a test may move it back.
func (s *Store) at(sh *shard, reading int64) int64 {
	if s.given {
		return reading
	}
	if reading < sh.last {
		return sh.last
	}
	sh.last = reading
	return reading
}

// Take applies one request. It allocates only when it first sees a key.
func (s *Store) Take(_ context.Context, r sluice.Request) (sluice.Decision, error) {
	if s.closed.Load() {
		return sluice.Decision{}, sluice.ErrClosed
	}
	return s.take(r, s.now())
}

// take is Take with the clock read: reading, which may be stale by the time
// the shard's lock is taken.
func (s *Store) take(r sluice.Request, reading int64) (sluice.Decision, error) {
	h := maphash.String(s.seed, r.Key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	now := s.at(sh, reading)
	e := sh.lookup(h, r.Key, r.Limit)
	if e == nil {
		c, err := sh.compile(r.Limit)
		if err == nil {
			err = c.p.CheckCost(r.Cost, r.Limit)
		}
		if err != nil || r.Cost == 0 {
			// Nothing to remember for an error or a peek at a fresh key.
			sh.mu.Unlock()
			if err != nil {
				return sluice.Decision{}, err
			}
			var fresh algo.State
			return algo.Step(&c.p, &fresh, now, 0, 0, false), nil
		}
		e = sh.insert(h, r.Key, c, s.perShard)
	} else {
		if r.Cost < 0 || r.Cost > e.c.p.Cap {
			sh.mu.Unlock()
			return sluice.Decision{}, e.c.p.CheckCost(r.Cost, r.Limit)
		}
		e.used = true
	}
	p := &e.c.p
	d := algo.Step(p, &e.st, now, r.Cost, s.lease(p, r.Cost), true)
	sh.mu.Unlock()
	return d, nil
}

func (s *Store) lease(p *algo.Params, cost int64) uint64 {
	if p.Alg != sluice.AlgorithmConcurrency || cost == 0 {
		return 0
	}
	return s.leases.Add(1)
}

// TakeAll applies rs all-or-nothing, holding the locks of every shard
// involved at once (in shard order, so concurrent calls cannot deadlock).
// When it refuses, nothing is charged and every decision has Allowed false;
// a request that alone would have been admitted has RetryAfter 0 and the
// Remaining it has now.
func (s *Store) TakeAll(_ context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if len(ds) != len(rs) {
		return fmt.Errorf("memstore: TakeAll: %d requests but %d decisions", len(rs), len(ds))
	}
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	for i := range rs {
		for j := range i {
			if rs[i].Key == rs[j].Key && rs[i].Limit == rs[j].Limit {
				return fmt.Errorf("%w: key %q under %s", sluice.ErrDuplicateRequest, rs[i].Key, rs[i].Limit)
			}
		}
	}
	var hbuf [8]uint64
	var ebuf [8]*entry
	var lbuf [8]int
	var nbuf [8]bool
	hs, es, locked, created := hbuf[:0], ebuf[:0], lbuf[:0], nbuf[:0]
	for _, r := range rs {
		h := maphash.String(s.seed, r.Key)
		hs = append(hs, h)
		locked = insertSorted(locked, int(h&s.mask))
	}
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	admitted := true
	defer func() {
		for i, e := range es {
			e.pinned = false
			if created[i] && !(admitted && rs[i].Cost > 0) {
				// Nothing was charged to a key this check created:
				// keep no state, as a lone peek or refusal would not.
				s.shards[hs[i]&s.mask].remove(e)
			}
		}
		for _, i := range locked {
			s.shards[i].mu.Unlock()
		}
	}()

	// One time for every shard involved: the latest any of them has used.
	now := s.now()
	if !s.given {
		for _, i := range locked {
			now = max(now, s.shards[i].last)
		}
		for _, i := range locked {
			s.shards[i].last = now
		}
	}
	for i, r := range rs {
		sh := &s.shards[hs[i]&s.mask]
		e := sh.lookup(hs[i], r.Key, r.Limit)
		isNew := e == nil
		if isNew {
			c, err := sh.compile(r.Limit)
			if err != nil {
				admitted = false
				return err
			}
			e = sh.insert(hs[i], r.Key, c, s.perShard)
		} else {
			e.used = true
		}
		e.pinned = true
		es = append(es, e)
		created = append(created, isNew)
		if err := e.c.p.CheckCost(r.Cost, r.Limit); err != nil {
			admitted = false
			return err
		}
		ds[i] = algo.Step(&e.c.p, &e.st, now, r.Cost, 0, false)
		admitted = admitted && ds[i].Allowed
	}
	for i, e := range es {
		if !admitted {
			if ds[i].Allowed {
				ds[i] = algo.Step(&e.c.p, &e.st, now, 0, 0, false)
				ds[i].Allowed, ds[i].RetryAfter, ds[i].Delay = false, 0, 0
			}
			continue
		}
		ds[i] = algo.Step(&e.c.p, &e.st, now, rs[i].Cost, s.lease(&e.c.p, rs[i].Cost), true)
	}
	return nil
}

// insertSorted adds v to the ascending set xs.
func insertSorted(xs []int, v int) []int {
	i := 0
	for i < len(xs) && xs[i] < v {
		i++
	}
	if i < len(xs) && xs[i] == v {
		return xs
	}
	xs = append(xs, 0)
	copy(xs[i+1:], xs[i:])
	xs[i] = v
	return xs
}

// Release gives back a concurrency lease. Unknown leases are ignored.
func (s *Store) Release(_ context.Context, key string, limit sluice.Limit, lease uint64) error {
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	if e := sh.lookup(h, key, limit); e != nil {
		algo.Release(&e.st, lease)
	}
	sh.mu.Unlock()
	return nil
}

// Len returns the number of (key, limit) states held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Close stops the sweeper. Later calls return sluice.ErrClosed. Close is
// idempotent.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		close(s.stop)
	})
	<-s.done
	return nil
}

// background sweeps every sweepEvery and, with a coarse clock, reads the
// clock every resolution (either may be 0: not needed).
func (s *Store) background(sweepEvery, resolution time.Duration) {
	defer close(s.done)
	var sweep, tick <-chan time.Time
	if sweepEvery > 0 {
		t := time.NewTicker(sweepEvery)
		defer t.Stop()
		sweep = t.C
	}
	if s.ticking {
		t := time.NewTicker(resolution)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.stop:
			return
		case <-sweep:
			s.sweep()
		case <-tick:
			s.coarse.Store(s.readClock())
		}
	}
}

// sweep removes keys whose state is back to fresh and that have not been
// used since the previous sweep, examining at most sweepBudget keys per
// shard from the oldest end of the eviction list. Keys in use are kept even
// when fresh (a generous limit is fresh again a moment after each request),
// so they are not forgotten and re-created between requests.
func (s *Store) sweep() {
	now := s.now()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		// A key removed as fresh at now must not be decided later at an
		// earlier time, when it may not have been.
		now := s.at(sh, now)
		e := sh.lru.prev
		for k := 0; k < sweepBudget && e != &sh.lru; k++ {
			prev := e.prev
			switch {
			case e.pinned || e.st.Idle > now:
			case e.used:
				e.used = false
			default:
				sh.remove(e)
			}
			e = prev
		}
		sh.mu.Unlock()
	}
}

func (sh *shard) lookup(h uint64, key string, lim sluice.Limit) *entry {
	e := sh.m[h]
	for e != nil && (!e.is(key) || e.c.lim != lim) {
		e = e.chain
	}
	return e
}

// moveToFront gives e a second chance at eviction.
func (sh *shard) moveToFront(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	sh.pushFront(e)
}

func (sh *shard) pushFront(e *entry) {
	e.prev, e.next = &sh.lru, sh.lru.next
	sh.lru.next.prev = e
	sh.lru.next = e
}

// insert adds a fresh entry, evicting while the shard is over its bound.
//
// Eviction is CLOCK (second chance) over the insertion-ordered list: a hit
// only sets the entry's used flag, so a decision on a known key writes
// nothing outside its own entry (moving entries on every hit, as an exact
// LRU list does, touches two other entries' cache lines). The hand walks
// from the oldest end: a used entry loses its flag and goes to the front,
// an unused one is evicted. Hot keys are used between passes and survive.
func (sh *shard) insert(h uint64, key string, c *compiled, bound int) *entry {
	e := &entry{hash: h, c: c, chain: sh.m[h], klen: int8(len(key))}
	if len(key) <= inlineKey {
		copy(e.kbuf[:], key)
	} else {
		e.klen, e.long = -1, strings.Clone(key)
	}
	sh.m[h] = e
	sh.pushFront(e)
	sh.n++
	for budget := 2*sh.n + 2; sh.n > bound && budget > 0; budget-- {
		victim := sh.lru.prev
		switch {
		case victim == &sh.lru:
			return e
		case victim.pinned || victim == e:
			sh.moveToFront(victim)
		case victim.used:
			victim.used = false
			sh.moveToFront(victim)
		default:
			sh.remove(victim)
		}
	}
	return e
}

func (sh *shard) remove(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	if first := sh.m[e.hash]; first == e {
		if e.chain == nil {
			delete(sh.m, e.hash)
		} else {
			sh.m[e.hash] = e.chain
		}
	} else {
		for p := first; p != nil; p = p.chain {
			if p.chain == e {
				p.chain = e.chain
				break
			}
		}
	}
	sh.n--
}
