package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
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

// Take applies one request. It allocates only when it first sees a key.
func (s *Store) Take(_ context.Context, r sluice.Request) (d sluice.Decision, err error) {
	err = s.take(&r, &d)
	return d, err
}

// take is Take, writing the decision into d. Keep Take a thin wrapper over
// it: Take's result then leaves in registers loaded from d field by field,
// instead of being built in Take's frame and copied out.
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
	// hint and then its word say it refuses the request without it. This
	// path, decide and timeOf written out below, decides as the generic
	// one (find, takeChanged, decide) and leaves the same state:
	// TestTakeFastPathIsGeneric holds it.
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

func (s *Store) lease(p *algo.Params, cost int64) uint64 {
	if !p.Desc().Leases || cost == 0 {
		return 0
	}
	return s.leases.Add(1)
}

// Release gives back a concurrency lease. Unknown leases are ignored.
// r.Slot is ignored: the store is not spread over shards.
func (s *Store) Release(_ context.Context, r sluice.Request, lease uint64) error {
	key, limit := r.Key, r.Limit
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

// Reset forgets r.Key's state under r.Limit (and every limit sharing it):
// the next request starts afresh. r.Slot is ignored.
func (s *Store) Reset(_ context.Context, r sluice.Request) error {
	key, limit := r.Key, r.Limit
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
