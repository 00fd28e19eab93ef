package memstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// Config configures a Store. The zero value is ready to use; each field
// documents its default.
type Config struct {
	// MaxKeys bounds how many (key, limit) states are held. Default
	// 100,000 (about 17 MB with IPv4 keys; docs/operations.md says how to
	// size it). The bound is enforced per shard, so the total can exceed
	// MaxKeys by less than the number of shards.
	MaxKeys int

	// Shards is the number of parts of the hash table, each with its own
	// lock for insertions and removals (finding a key and deciding take
	// only that key's lock), rounded up to a power of two. Default 64,
	// fewer for a small MaxKeys (each shard holds at least 16 keys).
	Shards int

	// SweepInterval is how often keys whose state has returned to fresh
	// are removed in the background. Default 1s; negative disables the
	// sweeper (keys are then only removed by eviction).
	SweepInterval time.Duration

	// Resolution is how often the store reads the clock: decisions are
	// made as of the last reading, which a background goroutine takes
	// every Resolution, instead of reading the clock on each (20-30 ns on
	// a virtual machine, a third of a decision). What that trades:
	//   - a refusal that a later reading could change (RetryAfter under a
	//     second) is decided again at the exact time, so the coarse clock
	//     refuses nothing the exact one would admit unless its goroutine
	//     has been kept from running for a second;
	//   - but an admitted decision is made as of the last reading:
	//     Remaining and ResetAfter can be up to rate × Resolution
	//     pessimistic, and a leaky bucket's Delay about Resolution long;
	//   - the goroutine wakes every Resolution while decisions are made,
	//     and sleeps after 100 ms without one.
	// Default 1ms; negative: read the clock on every decision. A store
	// with Config.Now reads it on every decision.
	Resolution time.Duration

	// Now replaces the clock, for tests. Its readings are used as they
	// are, even one earlier than a time already used (to test what the
	// algorithms do when a clock goes back). Default: the monotonic clock,
	// reported as wall time anchored at New.
	Now func() time.Time
}

// Store is an in-process sluice.Store. It is safe for concurrent use. Close
// it to stop its background goroutine (the sweeper and the coarse clock).
type Store struct {
	shards   []shard
	shift    uint // a key's shard is its hash >> 1 >> shift (see shardOf)
	perShard int
	seed     maphash.Seed
	keys     [5]uint64 // hash's keys for keys of 8 to 32 bytes
	given    bool      // the clock is Config.Now: its readings are used as they are
	base     time.Time
	baseUS   int64
	clock    func() time.Time
	leases   atomic.Uint64
	changed  changedLimits
	ticking  bool // a coarse clock: decisions read coarse
	// coarse is the last reading (µs) of a coarse clock: negative until a
	// decision has read it, 0 while the ticker sleeps and without a
	// coarse clock.
	coarse atomicReading
	wake   chan struct{}
	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

var _ sluice.Store = (*Store)(nil)

// sweepBudget is how many entries a sweep examines per shard, resuming
// where the previous sweep stopped.
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
	if cfg.Resolution == 0 {
		cfg.Resolution = time.Millisecond
	}
	shardBits := bits.Len(uint(cfg.Shards - 1))
	n := 1 << shardBits
	s := &Store{
		shards:   make([]shard, n),
		shift:    uint(63 - shardBits),
		perShard: (cfg.MaxKeys + n - 1) / n,
		seed:     maphash.MakeSeed(),
		keys:     [5]uint64{rand.Uint64(), rand.Uint64(), rand.Uint64(), rand.Uint64(), rand.Uint64()},
		base:     time.Now(),
		clock:    cfg.Now,
		given:    cfg.Now != nil,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		wake:     make(chan struct{}, 1),
	}
	s.baseUS = s.base.UnixMicro()
	seed2 := maphash.MakeSeed()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.tab.Store(newTable(8))
		sh.limits = make(map[sluice.Limit]*compiled)
		sh.seed2 = seed2
	}
	if cfg.Resolution > 0 && cfg.Now == nil {
		s.ticking = true
		s.coarse.Store(readAt(s.readClock()))
	}
	if cfg.SweepInterval > 0 || s.ticking {
		go s.background(cfg.SweepInterval, cfg.Resolution)
	} else {
		close(s.done)
	}
	return s, nil
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
	// s.coarse.Load().read(), written out: the two calls would take now
	// over the inliner's budget (TestHotPathInlines).
	if c := reading(s.coarse.v.Load()); c > 0 {
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
// and a third: one mix alone left the product's structure in the result,
// so that keys that differ in a few digits (user:100000 and on) fell
// unevenly on the shards and slots for some of the store's keys (in 1,000
// stores, one shard of 64 held up to 57% more than its share).
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

// Take applies one request. It allocates only when it first sees a key.
func (s *Store) Take(_ context.Context, r sluice.Request) (d sluice.Decision, err error) {
	err = s.take(&r, &d)
	return d, err
}

// take is Take, writing the decision into d. Take is a thin wrapper over
// it because that measured faster than the body in Take itself: one key,
// CPU per decision against sethvargo/go-limiter 0.70x -> 0.66x (bench/instr
// pair). Take's result now leaves in registers loaded from d field by
// field.
func (s *Store) take(r *sluice.Request, d *sluice.Decision) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	var h uint64
	if uint(len(r.Key)-8) <= 8 {
		h = s.hashShort(r.Key)
	}
	if h == 0 {
		h = s.hash(r.Key)
	}
	sh := &s.shards[s.shardOf(h)]
	t := sh.tab.Load()
	// find's usual case, written out: a key held in its home slot, under
	// r.Limit itself. The lock comes first, as in find, unless the slot's
	// hint and then its word say it refuses the request without it.
	i := h & t.mask()
	e := &t.slots[i]
	var c *compiled
	var k *cold
	var w0 ident
	var w1 uint64
	if len(r.Key) <= slotKey {
		w0, w1 = packShort(r.Key)
	} else {
		w0, w1 = sh.pack(r.Key, h)
	}
	hinted := t.hinted(i)
	if hinted {
		if w := e.shut.Load(); w.refusing() && s.refuse(e, w0, w1, r, d) {
			return nil
		}
	}
	e.mu.Lock()
	exact := false
	if e.id.Load().name() == w0 && e.rest.Load() == w1 {
		c, k = e.limit()
		exact = sameLimit(&c.lim, &r.Limit)
	}
	if !exact {
		e.mu.Unlock()
	}
	home := exact
	if !exact {
		if e, exact = t.find(h, w0, w1, &r.Limit); !exact {
			var err error
			*d, err = s.takeSlow(sh, h, e, r)
			return err
		}
		c, k = e.limit()
	}
	// What decide does, written out: this is the path of nearly every
	// decision.
	p := &c.p
	if uint64(r.Cost) > uint64(p.Cap) || r.MaxDelay < 0 { // a negative cost too
		e.mu.Unlock()
		return p.Check(*r)
	}
	e.setFlags(idUsed, true)
	at := s.now() // timeOf, written out
	if _, marked := e.shut.Load().ahead(); marked {
		at = s.ahead(e, at)
	}
	var st algo.State
	e.load(&st, k)
	if !algo.BucketTo(p, &st, at, r.Cost, true, d) {
		algo.StepTo(p, &st, at, r.Cost, algo.MaxDelay(r.MaxDelay), s.lease(p, r.Cost), true, d)
	}
	if !d.Allowed && s.ticking && d.RetryAfter < recheckBelow {
		at = s.recheck(e, p, &st, r.Cost, r.MaxDelay, d)
	}
	e.store(&st, k)
	// The word is computed, and the hint set right, after a refusal or
	// when either was set: an admission that takes the last room leaves
	// the word 0 (never refusing without the lock is always right), and
	// the next request, refused under the lock, publishes it.
	if !d.Allowed || hinted || e.shut.Load().refusing() {
		s.publish(e, p, &st, at)
		if closed := e.shut.Load().refusing(); home && closed != hinted {
			t.hint(i, closed)
		}
	}
	e.mu.Unlock()
	return nil
}

// refuse is Take without the entry's lock for a request of cost 1 that the
// entry's word w (algo.Closed, read from e.shut) says its state refuses:
// it writes the refusal into d and reports true, or reports false (the
// request is then decided under the lock). It writes nothing shared, so
// that a key under a flood of refused requests stays in every core's
// cache instead of moving between them with its lock.
//
// Why the answer is the one the lock would give: a word that is set is the
// state's own, since every change to the state under the lock while it is
// set republishes or clears it (a change that makes the state refuse
// leaves it 0, and the lock's path publishes it at the next refusal). It
// is read here before the clock, so the reading is no earlier than the
// time of the decision that published it (see now; after a decision at the
// exact time none is published until the coarse reading has passed it:
// markAhead). The limit is read between two loads of the word: an entry whose limit changes never publishes a word again, so
// two equal loads mean it was the limit the word was computed under. A
// coarse reading refuses here only a second or more before the word's
// time, as the lock's path would without deciding again at the exact
// time (recheck). An entry is marked used whenever its word is set (its
// word is cleared when the eviction hand or the sweeper clear the flag),
// so refusing here keeps it from eviction as deciding under the lock
// would.
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

// takeSlow is Take for a key the lookup without the shard's lock did not
// find (e nil), or found, locked, kept under another limit of its
// identity.
func (s *Store) takeSlow(sh *shard, h uint64, e *entry, r *sluice.Request) (sluice.Decision, error) {
	if e == nil {
		return s.takeLocked(sh, h, r)
	}
	defer e.mu.Unlock()
	return s.takeChanged(e, r)
}

// takeLocked is Take under the shard's lock, for a key the lookup without
// it did not find: it may have been inserted or moved meanwhile, or it is
// new.
func (s *Store) takeLocked(sh *shard, h uint64, r *sluice.Request) (sluice.Decision, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.lookup(h, r.Key, &r.Limit); e != nil {
		e.mu.Lock()
		defer e.mu.Unlock()
		return s.takeChanged(e, r)
	}
	c, err := sh.compile(&r.Limit)
	if err == nil && (uint64(r.Cost) > uint64(c.p.Cap) || r.MaxDelay < 0) { // a negative cost too
		err = c.p.Check(*r) // the error; copying r costs more than the test
	}
	if err != nil {
		return sluice.Decision{}, err
	}
	at := s.fresh(sh)
	if r.Cost == 0 {
		// Nothing to remember for a peek at a fresh key.
		var st algo.State
		return algo.Step(&c.p, &st, at, 0, algo.MaxDelay(r.MaxDelay), 0, false), nil
	}
	// The new entry is not marked used: a key seen once is the first the
	// eviction hand takes.
	e := s.insert(sh, h, r.Key, c)
	defer e.mu.Unlock()
	var d sluice.Decision
	s.decide(e, r, at, &d)
	return d, nil
}

// fresh returns the time to decide a key new to shard sh at, whose lock is
// held: now, or the time the sweeper last removed fresh keys at, if later
// (it reads the exact clock, and a key it removed then must not be decided
// at an earlier time, when it may not have been fresh).
func (s *Store) fresh(sh *shard) int64 {
	if s.given {
		return s.now()
	}
	return max(s.now(), sh.floor)
}

// takeChanged decides r on e, which is locked, whose state may be kept
// under another limit of the same identity than r's: it is carried over
// first (see params).
func (s *Store) takeChanged(e *entry, r *sluice.Request) (sluice.Decision, error) {
	at := s.timeOf(e)
	p, err := s.params(e, &r.Limit, at)
	if err == nil {
		err = p.Check(*r)
	}
	if err != nil {
		return sluice.Decision{}, err
	}
	e.setFlags(idUsed, true)
	var d sluice.Decision
	s.decide(e, r, at, &d)
	return d, nil
}

// params returns the parameters of lim for e, whose lock is held: those
// e's state is kept under if lim is that limit; otherwise lim's, the state
// carried over to them at now (algo.Adopt) unless they decide alike. An
// invalid lim leaves e as it was. Once its limit has changed, e no longer
// refuses without its lock (see entry.shut).
func (s *Store) params(e *entry, lim *sluice.Limit, now int64) (*algo.Params, error) {
	old, k := e.limit()
	if sameLimit(&old.lim, lim) {
		return &old.p, nil
	}
	c, err := s.changed.compile(*lim)
	if err != nil {
		return nil, err
	}
	e.shut.Store(shutChanged)
	if !old.p.Same(&c.p) {
		var st algo.State
		e.load(&st, k)
		algo.Adopt(&old.p, &c.p, &st, now)
		e.store(&st, k)
	}
	e.setRef(c, k)
	return &c.p, nil
}

// recheckBelow is the RetryAfter under which a refusal made as of a coarse
// reading is decided again at the exact time: the reading may be what
// refused it. A longer refusal would need a reading that much stale.
const recheckBelow = time.Second

// decide applies r, whose cost has been checked, to e, which is locked or
// not yet in the table, at time at, writing the decision into d.
func (s *Store) decide(e *entry, r *sluice.Request, at int64, d *sluice.Decision) {
	c, k := e.limit()
	p := &c.p
	var st algo.State
	e.load(&st, k)
	algo.StepTo(p, &st, at, r.Cost, algo.MaxDelay(r.MaxDelay), s.lease(p, r.Cost), true, d)
	if !d.Allowed && s.ticking && d.RetryAfter < recheckBelow {
		at = s.recheck(e, p, &st, r.Cost, r.MaxDelay, d)
	}
	e.store(&st, k)
	s.publish(e, p, &st, at)
}

// recheck decides a request of cost and maxDelay on e, which is locked,
// again at the exact time, after a refusal d as of a coarse reading, and
// returns that time.
func (s *Store) recheck(e *entry, p *algo.Params, st *algo.State, cost int64, maxDelay time.Duration, d *sluice.Decision) int64 {
	at := s.readClock()
	algo.StepTo(p, st, at, cost, algo.MaxDelay(maxDelay), s.lease(p, cost), true, d)
	s.markAhead(e, at)
	return at
}

func (s *Store) lease(p *algo.Params, cost int64) uint64 {
	if p.Alg != sluice.AlgorithmConcurrency || cost == 0 {
		return 0
	}
	return s.leases.Add(1)
}

// TakeAll applies rs all-or-nothing, holding the locks of every shard
// involved at once (in shard order, so concurrent calls cannot deadlock)
// and of every entry. When it refuses, nothing is charged and every
// decision has Allowed false; a request that alone would have been
// admitted has RetryAfter 0 and the Remaining it has now.
func (s *Store) TakeAll(_ context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if len(ds) != len(rs) {
		return fmt.Errorf("memstore: TakeAll: %d requests but %d decisions", len(rs), len(ds))
	}
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	for i := range rs {
		for j := range i {
			if rs[i].Key == rs[j].Key && rs[i].Limit.Shares(rs[j].Limit) {
				return fmt.Errorf("%w: key %q under %s", sluice.ErrDuplicateRequest, rs[i].Key, rs[i].Limit)
			}
		}
	}
	var hbuf [8]uint64
	var ebuf [8]*entry
	var nbuf [8]bool
	var lbuf [8]int
	hs, locked := s.lockShards(rs, hbuf[:0], lbuf[:0])
	es, created := ebuf[:0], nbuf[:0]
	admitted := false
	defer func() { s.finish(rs, hs, es, created, locked, admitted) }()
	var err error
	if es, created, err = s.entries(rs, hs, es, created); err != nil {
		return err
	}
	admitted = s.decideAll(rs, hs, es, created, ds)
	return nil
}

// lockShards appends the requests' hashes to hs and their shards to locked,
// in ascending order, and locks those shards in that order.
func (s *Store) lockShards(rs []sluice.Request, hs []uint64, locked []int) ([]uint64, []int) {
	for _, r := range rs {
		h := s.hash(r.Key)
		hs = append(hs, h)
		locked = insertSorted(locked, s.shardOf(h))
	}
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	return hs, locked
}

// entries appends to es every request's entry, found or created, pinned and
// locked, and to created whether the check created it; it checks every cost.
func (s *Store) entries(rs []sluice.Request, hs []uint64, es []*entry, created []bool) ([]*entry, []bool, error) {
	// First every entry is found or created, and pinned, with no entry's
	// lock held: creating one may move others (growth, and the backward
	// shift of an eviction), which takes their locks. Pinned entries are
	// not evicted.
	for i, r := range rs {
		sh := &s.shards[s.shardOf(hs[i])]
		e := sh.lookup(hs[i], r.Key, &r.Limit)
		isNew := e == nil
		if isNew {
			c, err := sh.compile(&r.Limit)
			if err != nil {
				return es, created, err
			}
			e = s.insert(sh, hs[i], r.Key, c)
		} else {
			e.mu.Lock()
		}
		e.setFlags(idPinned, true)
		e.mu.Unlock()
		created = append(created, isNew)
	}
	// Then each is locked where it is now.
	for i, r := range rs {
		e := s.shards[s.shardOf(hs[i])].lookup(hs[i], r.Key, &r.Limit)
		e.mu.Lock()
		es = append(es, e)
		if err := check(e, &r); err != nil {
			return es, created, err
		}
	}
	return es, created, nil
}

// check checks r against its limit, which e's state may be kept under or
// not yet (decideAll carries it over, at the time it decides at).
func check(e *entry, r *sluice.Request) error {
	c, _ := e.limit()
	if sameLimit(&c.lim, &r.Limit) {
		return c.p.Check(*r)
	}
	p, err := algo.Compile(r.Limit)
	if err != nil {
		return err
	}
	return p.Check(*r)
}

// decideAll decides every request at one time, the exact time (or the
// time the sweeper last removed fresh keys at in a shard where a key is
// new, if later: see fresh), charges them only if all are admitted, and
// reports whether they were. Every lock is held.
func (s *Store) decideAll(rs []sluice.Request, hs []uint64, es []*entry, created []bool, ds []sluice.Decision) bool {
	now := s.readClock()
	for i := range es {
		if created[i] && !s.given {
			now = max(now, s.shards[s.shardOf(hs[i])].floor)
		}
	}
	admitted := true
	for i, e := range es {
		if !created[i] {
			e.setFlags(idUsed, true)
		}
		p, _ := s.params(e, &rs[i].Limit, now) // compiled without error by check
		_, k := e.limit()
		var st algo.State
		e.load(&st, k)
		ds[i] = algo.Step(p, &st, now, rs[i].Cost, algo.MaxDelay(rs[i].MaxDelay), 0, false)
		e.store(&st, k)
		admitted = admitted && ds[i].Allowed
	}
	for i, e := range es {
		c, k := e.limit()
		p := &c.p
		var st algo.State
		e.load(&st, k)
		switch {
		case !admitted && ds[i].Allowed:
			ds[i] = algo.Step(p, &st, now, 0, algo.MaxDelay(rs[i].MaxDelay), 0, false)
			ds[i].Allowed, ds[i].RetryAfter, ds[i].Delay = false, 0, 0
		case admitted:
			ds[i] = algo.Step(p, &st, now, rs[i].Cost, algo.MaxDelay(rs[i].MaxDelay), s.lease(p, rs[i].Cost), true)
		}
		e.store(&st, k)
		s.publish(e, p, &st, now)
		s.markAhead(e, now)
	}
	return admitted
}

// finish removes the entries a check created but did not charge (a lone
// peek or refusal would keep no state either), and unlocks everything.
func (s *Store) finish(rs []sluice.Request, hs []uint64, es []*entry, created []bool, locked []int, admitted bool) {
	drop := func(i int) bool { return created[i] && !(admitted && i < len(es) && rs[i].Cost > 0) }
	// An entry to remove is first marked dead under its lock (it then
	// matches no key, and probing past it still works), and removed after
	// every entry's lock is released: its removal moves entries back,
	// which takes their locks.
	for i := range created {
		var e *entry
		if i < len(es) {
			e = es[i]
		} else {
			// Pinned but not locked: an error stopped the check first.
			e = s.shards[s.shardOf(hs[i])].lookup(hs[i], rs[i].Key, &rs[i].Limit)
			e.mu.Lock()
		}
		e.setFlags(idPinned, false)
		if drop(i) {
			e.markDead()
		}
		e.mu.Unlock()
	}
	for i := range created {
		if !drop(i) {
			continue
		}
		sh := &s.shards[s.shardOf(hs[i])]
		t := sh.tab.Load()
		w0, w1 := sh.pack(rs[i].Key, hs[i])
		if e := t.probe(hs[i], w0, w1, &rs[i].Limit, true); e != nil {
			e.mu.Lock()
			s.removeAt(sh, t, t.index(e))
		}
	}
	for _, i := range locked {
		s.shards[i].mu.Unlock()
	}
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
	h := s.hash(key)
	sh := &s.shards[s.shardOf(h)]
	w0, w1 := sh.pack(key, h)
	e, _ := sh.tab.Load().find(h, w0, w1, &limit)
	if e == nil {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if e = sh.lookup(h, key, &limit); e == nil {
			return nil
		}
		e.mu.Lock()
	}
	_, k := e.limit()
	var st algo.State
	e.load(&st, k)
	algo.Release(&st, lease)
	e.store(&st, k)
	e.mu.Unlock()
	return nil
}

var _ sluice.Resetter = (*Store)(nil)

// Reset forgets key's state under limit (and every limit sharing it): the
// next request starts afresh.
func (s *Store) Reset(_ context.Context, key string, limit sluice.Limit) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	h := s.hash(key)
	sh := &s.shards[s.shardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.lookup(h, key, &limit); e != nil && !e.pinned() {
		t := sh.tab.Load()
		e.mu.Lock()
		s.removeAt(sh, t, t.index(e))
	}
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

// sweep removes keys whose state is back to fresh and that have not been
// used since the previous sweep, examining at most sweepBudget slots per
// shard, resuming each time where the previous sweep stopped. Keys in use
// are kept even when fresh (a generous limit is fresh again a moment after
// each request), so they are not forgotten and re-created between
// requests.
func (s *Store) sweep() {
	now := s.readClock()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if !s.given {
			sh.floor = max(sh.floor, now)
		}
		t := sh.tab.Load()
		for steps, seen := 0, 0; steps < len(t.slots) && seen < sweepBudget; {
			j := sh.sweep & t.mask()
			if e := &t.slots[j]; e.live() && !e.pinned() {
				seen++
				if s.sweepOne(sh, t, j, now) {
					continue // slot j now holds the entry moved back into it, if any
				}
			}
			sh.sweep++
			steps++
		}
		sh.mu.Unlock()
	}
}

// sweepOne removes the entry at slot j if it is fresh at now and unused
// since the last pass, and reports whether it did; otherwise it clears its
// used flag. The shard's lock is held.
func (s *Store) sweepOne(sh *shard, t *table, j uint64, now int64) bool {
	e := &t.slots[j]
	e.mu.Lock()
	switch {
	case e.idle > now:
	case e.used():
		e.unuse()
	default:
		s.removeAt(sh, t, j)
		return true
	}
	e.mu.Unlock()
	return false
}
