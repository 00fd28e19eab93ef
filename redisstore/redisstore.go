// Package redisstore is the sluice.Store for a fleet: the state of every
// limit lives in Redis (standalone, Sentinel or Cluster), so every instance
// of a service enforces the same limits, and each decision is the one the
// in-process memstore would make.
//
// Each algorithm is a Lua port of sluice's Go arithmetic (scripts/*.lua,
// embedded), so a decision is one atomic round trip. On Redis 7 and later
// the Lua is a function library, which the store loads (FUNCTION LOAD, on
// every master of a Cluster) the first time a call finds it missing and
// calls with FCALL; on older servers, or with Config.Scripts, it is sent as
// scripts (EVALSHA, reloaded on NOSCRIPT). A function costs the server
// about a third less per lone decision than the same script, which Redis
// runs in full on every call. The library is named after a digest of its
// text (sluice_<12 hex digits>): versions of sluice sharing a server each
// load their own, and a library no instance uses any more can be removed
// with FUNCTION DELETE. Time is read from Redis TIME inside the script, so
// instances whose clocks disagree still agree on every decision. Every key
// carries a TTL fitted to its algorithm and is gone soon after its state is
// fresh again.
//
// Concurrent decisions share round trips and scripts: requests from many
// goroutines are gathered by a few workers, without waiting for a batch to
// fill; while a pipeline of several requests is in flight, those that come
// go together in the next, at most a round trip later. Those of one Cluster
// slot (all of them, on a standalone server) are decided by one batch
// script, one check after another, each exactly as it would be alone; the
// checks of a hot key that follow one another there read and write its
// state once. A lone request still costs one round trip and one
// script; a crowd costs the server one script call per batch instead of one
// per decision. Keys refused until a known time are answered locally
// until then (the near cache), so a retry storm against refused keys costs
// no Redis commands at all.
//
// A decision is charged at most once: go-redis does not send sluice's
// scripts again after a timeout or a broken connection (its retries,
// Options.MaxRetries, are for commands that may run twice), and the store
// sends one again only when its write failed, so Redis cannot have run it.
// A call whose reply is lost fails (package failover then decides it).
// With a *redis.Client whose pool has room (at least twice Workers + 1
// connections) and that negotiates no maintenance notifications
// (MaintNotificationsConfig Mode disabled, as sluice serve sets it, or
// RESP2), each worker and the lone caller keep a connection between round
// trips while they are busy, skipping go-redis's health check of a pooled
// connection, a system call on every command: 2-3 µs less per round trip on
// loopback. One idle 100 ms goes back to the pool, whose check vets it
// again, so a connection the server closed for idleness is never used; a
// server that goes away within those 100 ms fails the next call on each
// such connection, as it fails the calls in flight.
//
// With Config.Leases, hot keys are decided locally from quota leases, units
// of a limit Redis hands out ahead of use (scripts/lease.lua), a script
// call per lease instead of per decision; see LeaseConfig for what that
// trades (capacity held, never excess).
//
// Composite checks (Limiter.Check) are all-or-nothing in one script when all
// their keys hash to one Redis Cluster slot: always on a standalone server,
// and on a cluster when their requests share a Slot (sluice.Request.Slot,
// with Config.Slots).
// Such a check pays the call, the clock and the reply once: on Redis 7, a
// check of three GCRA limits costs the server 2.4 times a lone decision's
// instructions, its extra requests each about what a request costs in a
// batch (bench/REDIS.md). When they span slots, each slot's part is
// decided atomically and, if any part refuses, the parts already charged
// are refunded in a second round trip. That mode never admits a request
// some limit refused; between the charge and the refund (one round trip),
// another request may see the charge and be refused when it would
// otherwise have been admitted.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/deadline"
)

// Client is the part of a go-redis client the store uses.
// *redis.Client, *redis.ClusterClient, *redis.Ring and any
// redis.UniversalClient (standalone, Sentinel failover or Cluster) satisfy it.
// When the client also has go-redis's Process method, as all of those do,
// the store builds its FCALL commands itself and sends them through Process
// (and through its pipelines'), with fewer allocations than FCall: a
// wrapper that overrides FCall alone does not see those calls; its hooks
// (AddHook) see every command (a hook added after the store's first calls
// reaches the connections the store keeps within a second).
type Client interface {
	redis.Scripter
	FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd
	FunctionLoadReplace(ctx context.Context, code string) *redis.StringCmd
	Pipeline() redis.Pipeliner
}

// Config configures a Store. The zero value is ready to use; each field
// documents its default.
type Config struct {
	// Prefix starts every key sluice writes. Default "sluice:". It must not
	// contain '{' or '}', which Redis Cluster reads as a hash tag.
	Prefix string

	// Slots makes each request's Slot (sluice.Request.Slot) choose the
	// Redis Cluster slot of its key: requests of one Slot share a slot,
	// so that a check of them is one atomic script (and can use quota
	// leases); a request without one is placed by its whole Key, which
	// spreads keys over the cluster (no hot slot) at the price of refunds
	// across slots. Keys are then named <prefix>{<len>:<slot>}<len>:<key>/…,
	// the slot in the hash tag. Default false: Slot is ignored, and each
	// key is its own hash tag, <prefix>{<len>:<key>}…. Turning it on or
	// off renames every key: counts start afresh. sluice serve turns it on
	// for a Cluster.
	Slots bool

	// NearCache is how many refused keys are remembered locally until the
	// time Redis said they may retry. Default 10,000; negative disables it.
	NearCache int

	// Workers is how many pipelines may be in flight at once. Default 4.
	// While a pipeline of 2 to 63 calls is in flight, the calls that come
	// wait for it and go together in the next; lone calls and a backlog
	// (64 calls or more at once) go out in parallel.
	Workers int

	// MaxBatch is the most calls a worker takes at once. Default 128. The
	// take calls among them are merged into batch scripts of up to 64
	// checks each (per Cluster slot); the rest share a pipeline.
	MaxBatch int

	// Scripts makes the store send its Lua as scripts (EVALSHA) even to a
	// server that has functions. By default it loads them as a function
	// library (FUNCTION LOAD, Redis 7 and later; on every master of a
	// Cluster) the first time a call finds it missing, and calls them with
	// FCALL, which costs the server about a third less per lone decision;
	// on a server without functions (Redis 6, or an ACL that denies them)
	// it falls back to scripts by itself.
	Scripts bool

	// Leases, when enabled, lets the store admit requests of hot keys from
	// quota leases taken from Redis ahead of use: a script call per lease
	// instead of per decision, never above the limit (see LeaseConfig).
	// Default off.
	Leases LeaseConfig

	// Now replaces Redis TIME with a clock of the caller's, for tests that
	// replay fixed timelines. Never set it in production: instances would
	// then decide by their own clocks.
	Now func() time.Time
}

// Store is a sluice.Store backed by Redis. It is safe for concurrent use.
// Close it to stop its workers; it does not close the client.
type Store struct {
	client  Client
	cluster bool
	prefix  string
	slots   bool // Config.Slots
	now     func() time.Time
	born    time.Time // localNow's anchor
	near    *nearCache
	batch   *batcher
	leases  *leaser // nil unless Config.Leases.Enabled
	leaseID atomic.Uint64
	skew    atomic.Int64 // added to the local clock, by tests that skew instances

	limitsMu sync.Mutex                                     // held by writers of limits
	limits   atomic.Pointer[map[sluice.Limit]*lastCompiled] // copied on write, at most maxCompiled
	last     atomic.Pointer[lastCompiled]                   // the limit compile returned last, from limits
}

// lastCompiled is a limit and its compiled form, as Store.limits holds
// them. Store.last is the one used last: comparing a limit with it costs
// less than hashing the limit, and much traffic decides under one limit.
type lastCompiled struct {
	l sluice.Limit
	c compiled
}

var _ sluice.Store = (*Store)(nil)

// New returns a Store that keeps its state through client.
func New(client Client, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: New: client is nil")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "sluice:"
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, fmt.Errorf("redisstore: Prefix %q must not contain '{' or '}'", cfg.Prefix)
	}
	if cfg.NearCache == 0 {
		cfg.NearCache = 10_000
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 128
	}
	_, cluster := client.(*redis.ClusterClient)
	scripts() // built once, here rather than on the first decision
	s := &Store{
		client:  client,
		cluster: cluster,
		prefix:  cfg.Prefix,
		slots:   cfg.Slots,
		now:     cfg.Now,
	}
	s.limits.Store(&map[sluice.Limit]*lastCompiled{})
	if cfg.NearCache > 0 {
		s.near = newNearCache(cfg.NearCache)
	}
	s.born = time.Now()
	s.leaseID.Store(uint64(s.born.UnixNano()))
	s.batch = newBatcher(client, cfg.Workers, cfg.MaxBatch)
	s.batch.scripts.Store(cfg.Scripts)
	if cfg.Leases.Enabled {
		s.leases = newLeaser(s, cfg.Leases)
	}
	return s, nil
}

// Close stops the pipeline workers. Calls after Close return
// sluice.ErrClosed.
func (s *Store) Close() error {
	s.leases.close() // gives back what they hold
	s.batch.close()
	return nil
}

// request is one sluice.Request prepared for a script.
type request struct {
	sluice.Request
	p          algo.Params
	params     any // the script argument holding p (see compiled)
	state, log string
	lease      string
}

// compiled is a limit as the scripts take it: its parameters, and the
// script argument that holds its algorithm code and, in hexadecimal, the
// parameters the algorithm reads, in the order scripts/algorithms.lua documents.
type compiled struct {
	p      algo.Params
	params any    // the script argument, a string boxed once
	name   string // the limit's part of its keys (limitName)
	cal    *calendarArg
}

// calendarArg is the script argument of a calendar window, which holds the
// bounds of the periods around now (the scripts have no time zones), for
// the period it was built in: rebuilt once per period.
type calendarArg struct {
	last atomic.Pointer[calendarBounds]
}

type calendarBounds struct {
	from, to int64 // the period the argument was built in
	arg      any
}

// arg returns the script argument of the calendar window c at now (µs):
// "1:<N>:<4 bounds>" (see scripts/algorithms.lua).
func (c *compiled) calendar(now int64) any {
	if b := c.cal.last.Load(); b != nil && b.from <= now && now < b.to {
		return b.arg
	}
	bs := c.p.Periods(now)
	arg := c.params.(string)
	for _, v := range bs {
		arg += ":" + strconv.FormatInt(v, 16)
	}
	c.cal.last.Store(&calendarBounds{from: bs[1], to: bs[2], arg: arg})
	return arg
}

// maxCompiled bounds the cache of compiled limits. Limits come from code
// and configuration, but an API that lets clients name limits must not let
// them grow memory: past this many, limits are compiled on every use.
const maxCompiled = 1024

// compile returns l compiled, from the cache when it can: shared, read
// only. The cache is read without a lock (every decision reads it; a new
// limit copies it).
func (s *Store) compile(l *sluice.Limit) (*compiled, error) {
	if last := s.last.Load(); last != nil && last.l == *l {
		return &last.c, nil
	}
	if lc, ok := (*s.limits.Load())[*l]; ok {
		s.last.Store(lc)
		return &lc.c, nil
	}
	return s.compileNew(*l)
}

// compileNew compiles l and caches it while the cache has room.
func (s *Store) compileNew(l sluice.Limit) (*compiled, error) {
	p, err := algo.Compile(l)
	if err != nil {
		return nil, err
	}
	b := strconv.AppendInt(nil, int64(p.Alg), 10)
	var buf [8]int64
	vs := p.WireValues(buf[:0]) // the vector of algo.Desc.Wire
	for _, v := range vs {      // in hexadecimal: cheaper for Lua to read
		b = append(b, ':')
		b = strconv.AppendInt(b, v, 16)
	}
	lc := &lastCompiled{l, compiled{p: p, params: any(string(b)), name: limitName(l)}}
	if p.Calendar() {
		lc.c.cal = &calendarArg{}
	}
	s.limitsMu.Lock()
	if old := *s.limits.Load(); len(old) < maxCompiled {
		m := make(map[sluice.Limit]*lastCompiled, len(old)+1)
		maps.Copy(m, old)
		m[l] = lc
		s.limits.Store(&m)
	}
	s.limitsMu.Unlock()
	return &lc.c, nil
}

// prepare writes r into q as the scripts take it: checked, its limit
// compiled, its keys named.
func (s *Store) prepare(r sluice.Request, q *request) error {
	c, err := s.prepareArgs(r, q)
	if err != nil {
		return err
	}
	var buf [128]byte
	s.prepareKeys(q, s.appendState(buf[:0], &r, c.name))
	return nil
}

// prepareKeys completes q, which prepareArgs wrote, with its keys, state
// being its state key's bytes (appendState), and a concurrency request's
// lease id.
func (s *Store) prepareKeys(q *request, state []byte) {
	q.state, q.log = keysFrom(state, usesLog(q.p.Alg))
	q.lease = ""
	if q.p.Desc().Leases && q.Cost > 0 {
		q.lease = strconv.FormatUint(s.leaseID.Add(1), 10)
	}
}

// prepareArgs is prepare without the keys (and a concurrency request's
// lease id): the request checked, its limit compiled and its argument,
// written into q (returned, the request would be copied once more).
func (s *Store) prepareArgs(r sluice.Request, q *request) (*compiled, error) {
	c, err := s.compile(&r.Limit)
	if err == nil && (uint64(r.Cost) > uint64(c.p.Cap) || r.MaxDelay < 0) { // a negative cost too
		err = c.p.Check(r) // the error
	}
	if err != nil {
		return nil, err
	}
	p := &c.p
	q.Request, q.p, q.params = r, *p, c.params
	if c.cal != nil {
		q.params = c.calendar(s.wallNow().UnixMicro())
	}
	if p.Desc().Shapes && r.MaxDelay > 0 {
		// the request's bound rides with its limit (scripts/args.lua)
		q.params = c.params.(string) + ":" + strconv.FormatInt(algo.MaxDelay(r.MaxDelay), 16)
	}
	return c, nil
}

// usesLog reports whether an algorithm keeps a log (a sorted set) beside its
// state hash.
func usesLog(alg sluice.Algorithm) bool {
	return algo.Of(alg).State == algo.StateLog
}

// clock returns the first script argument: "" for Redis TIME, or the test
// clock in µs.
func (s *Store) clock() string {
	if s.now == nil {
		return ""
	}
	return strconv.FormatInt(s.now().UnixMicro(), 10)
}

// localNow is the clock of the near cache and the leases: the test clock,
// or the monotonic one, anchored at New. Only differences between its
// readings are used, never compared with Redis time, so it reads the
// monotonic clock alone: time.Now reads the wall clock too, a second
// reading on the path of every leased decision. A calendar's bounds
// follow the wall clock (wallNow).
func (s *Store) localNow() time.Time {
	if s.now != nil {
		return s.now()
	}
	return s.born.Add(time.Since(s.born) + time.Duration(s.skew.Load()))
}

// wallNow is the wall clock (or the test clock), for a calendar window's
// bounds, which follow the wall clock's steps.
func (s *Store) wallNow() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now().Add(time.Duration(s.skew.Load()))
}

// call builds one script invocation for rs; undo, if not nil, holds each
// request's undo field. A request names its state key, and its log key only
// if its algorithm keeps one, and sends one argument (see
// scripts/args.lua): its limit (compiled.params), followed by its cost,
// lease id and undo field unless its cost is 1 and it has neither. Every key
// and argument costs the server time: a batch script spends about as much
// on them as on the decision itself.
func (s *Store) call(sc *script, rs []request, undo []string) *call {
	c := &call{script: sc, n: len(rs), packed: -1} // done: made if it is queued (submit)
	keys, args := c.keyBuf[:0], c.argBuf[:0]       // room for a lone request's
	args = append(args, s.clock())
	if len(rs) > 1 || sc.batch == nil {
		// the count; a take call of one request sends none (args.lua)
		args = append(args, len(rs))
	}
	for i, r := range rs {
		keys = append(keys, r.state)
		if usesLog(r.p.Alg) {
			keys = append(keys, r.log)
		}
		u := ""
		if undo != nil {
			u = undo[i]
		}
		switch {
		case r.Cost == 1 && r.lease == "" && u == "":
			args = append(args, r.params)
		case r.lease == "" && u == "":
			args = append(args, r.params.(string)+"|"+strconv.FormatInt(r.Cost, 10))
		default:
			args = append(args, r.params.(string)+"|"+strconv.FormatInt(r.Cost, 10)+","+r.lease+","+u)
		}
	}
	c.keys, c.args = keys, args
	if len(rs) == 1 {
		c.limit = rs[0].p.Cap
	}
	if s.cluster {
		c.slot = slot(keys[0])
	}
	return c
}

// run sends c through the batcher and waits for its reply, as a list of
// values (a packed reply spelled out, see call.values).
func (s *Store) run(ctx context.Context, c *call) ([]any, error) {
	if err := s.await(ctx, c); err != nil {
		return nil, err
	}
	return c.result(), nil
}

// await sends c through the batcher and waits for its reply: c.reply, or
// c.packed (see call.values).
func (s *Store) await(ctx context.Context, c *call) error {
	if err := s.batch.submit(ctx, c); err != nil {
		return err
	}
	if answered(c) {
		return c.err
	}
	ended, t := expiry(ctx)
	defer releaseTimer(t)
	select {
	case <-c.done:
		return c.err
	case <-ended:
		return ctx.Err()
	case <-expiredC(t):
		return context.DeadlineExceeded
	}
}

// expiry returns what a caller waiting on ctx watches: a timer at ctx's
// deadline (nil without one; expiredC is its channel, releaseTimer gives it
// back), and a channel closed when ctx ends otherwise (deadline.ParentDone:
// for failover's per-call deadline, its caller's Done, so that the
// deadline costs one timer, not two). A caller waits on the timer besides
// ctx.Done: a timer wakes the goroutine waiting on its channel itself,
// where a context's deadline runs a function on a goroutine of its own
// that then wakes the waiter, and on a loaded machine each goroutine woken
// may wait a full pass of the scheduler's queue (TestChaosStall measured
// such waits of 0.4 s after a 50 ms deadline, whose bare timer fired 64 ms
// late). At the timer it returns context.DeadlineExceeded, as ctx is about
// to.
func expiry(ctx context.Context) (ended <-chan struct{}, t *time.Timer) {
	d, ok := ctx.Deadline()
	if !ok {
		return ctx.Done(), nil
	}
	if t, ok = timers.Get().(*time.Timer); ok {
		t.Reset(time.Until(d))
	} else {
		t = time.NewTimer(time.Until(d))
	}
	return deadline.ParentDone(ctx), t
}

// timers holds stopped timers for expiry to reuse: a timer each call
// waiting on Redis. Once Stop or Reset returns, a timer's channel holds no
// value from before (Go 1.23 timers), so a reused timer fires only at its
// new deadline.
var timers sync.Pool

// expiredC is t's channel: nil, which never receives, without a timer.
func expiredC(t *time.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

// releaseTimer stops t, if any, and keeps it for reuse.
func releaseTimer(t *time.Timer) {
	if t != nil {
		t.Stop()
		timers.Put(t)
	}
}

// remember puts a refusal in the near cache. Concurrency refusals are not
// cached: a release can free a slot before the leases' expiry.
func (s *Store) remember(q request, d sluice.Decision) {
	if !d.Allowed && d.RetryAfter > 0 && q.Cost > 0 && !q.p.Desc().Leases {
		s.near.put(q.state, &q.Limit, q.Cost, q.MaxDelay, d, s.localNow())
	}
}

// wait waits for every call's reply, or until ctx ends: then it returns
// ctx's error and the caller hands the calls to settleLater.
func (s *Store) wait(ctx context.Context, calls []*call) error {
	for len(calls) > 0 && answered(calls[0]) {
		calls = calls[1:]
	}
	if len(calls) == 0 {
		return nil
	}
	ended, t := expiry(ctx)
	defer releaseTimer(t)
	for _, c := range calls {
		select {
		case <-c.done:
		case <-ended:
			return ctx.Err()
		case <-expiredC(t):
			return context.DeadlineExceeded
		}
	}
	return nil
}

// answered reports whether c has its reply: it ran on the caller's
// goroutine, or its round trip was quick.
func answered(c *call) bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// settleLater settles calls whose caller has gone (its context ended, or a
// later group could not be submitted): in the background, once their
// replies arrive, it refunds every group that charged. The caller got an
// error, so the check is not left charged, in part or whole.
func (s *Store) settleLater(calls []*call, qs []request, groups [][]int) {
	if len(calls) == 0 {
		return
	}
	go s.settle(calls, qs, make([]sluice.Decision, len(qs)), groups, true)
}

// settle waits for every group's reply (they always arrive: the callers'
// deadlines, the client's timeouts and Close bound them) and, if any group
// failed or refused, refunds the groups that charged, so that a check is
// never charged in part; if abandoned is set, it refunds every group that
// charged.
func (s *Store) settle(calls []*call, qs []request, ds []sluice.Decision, groups [][]int, abandoned bool) error {
	undo := make([]string, len(qs))
	charged := make([]bool, len(calls))
	var firstErr error
	refused := false
	for g, c := range calls {
		<-c.done
		err := c.err
		if err == nil {
			var tokens []string
			if tokens, err = c.decode(pickDecisions(ds, groups[g])); err == nil {
				charged[g] = true
				for k, i := range groups[g] {
					if tokens != nil {
						undo[i] = tokens[k]
					}
					charged[g] = charged[g] && ds[i].Allowed
				}
			}
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
		refused = refused || !charged[g]
	}
	if !refused && firstErr == nil && !abandoned {
		return nil
	}
	var refunds []*call
	var which [][]int
	for g, idx := range groups[:len(calls)] {
		if !charged[g] {
			continue
		}
		rs := pick(qs, idx)
		for k, i := range idx { // refund exactly the lease that was granted
			rs[k].lease = strconv.FormatUint(ds[i].Lease, 10)
		}
		c := s.call(scripts().refund, rs, pickStrings(undo, idx))
		if err := s.batch.submit(context.Background(), c); err != nil {
			return err
		}
		refunds = append(refunds, c)
		which = append(which, idx)
	}
	for k, c := range refunds {
		<-c.done
		err := c.err
		if err == nil {
			_, err = decode(c.reply, pickDecisions(ds, which[k]))
		}
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("refund: %w", err)
		}
	}
	return firstErr
}

// groups splits requests by Redis Cluster slot, keeping their order. On a
// standalone server every request is in one group.
func (s *Store) groups(qs []request) [][]int {
	if !s.cluster {
		idx := make([]int, len(qs))
		for i := range idx {
			idx[i] = i
		}
		return [][]int{idx}
	}
	var slots []uint16
	var groups [][]int
	for i, q := range qs {
		sl := slot(q.state)
		g := 0
		for g < len(slots) && slots[g] != sl {
			g++
		}
		if g == len(slots) {
			slots = append(slots, sl)
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

func pick(qs []request, idx []int) []request {
	out := make([]request, len(idx))
	for k, i := range idx {
		out[k] = qs[i]
	}
	return out
}

func pickStrings(xs []string, idx []int) []string {
	out := make([]string, len(idx))
	for k, i := range idx {
		out[k] = xs[i]
	}
	return out
}

// pickDecisions returns a view writing through to ds at idx.
func pickDecisions(ds []sluice.Decision, idx []int) decisionView {
	return decisionView{ds: ds, idx: idx}
}

type decisionView struct {
	ds  []sluice.Decision
	idx []int
}

var _ sluice.Resetter = (*Store)(nil)

// Reset deletes the state of r's key (r.Key in r.Slot) under r.Limit (and
// every limit sharing it: the state hash and the log) in one round trip,
// and forgets a refusal of it this instance's near cache remembers, and
// the units its quota lease of the key holds (they were counted in the
// state deleted); other instances' near caches keep theirs until its
// RetryAfter, and their leases theirs until spent or given back.
func (s *Store) Reset(ctx context.Context, r sluice.Request) error {
	if err := r.Limit.Validate(); err != nil {
		return err
	}
	state, log := s.stateKeys(&r)
	s.near.forget(state)
	s.leases.forget(state)
	pipe := s.client.Pipeline() // Client has no DEL of its own; one command, one round trip
	pipe.Del(ctx, state, log)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redisstore: reset %q: %w", r.Key, err)
	}
	return nil
}

// Release ends lease, a concurrency lease of r's key (r.Key in r.Slot)
// under r.Limit.
func (s *Store) Release(ctx context.Context, r sluice.Request, lease uint64) error {
	var q request
	if err := s.prepare(sluice.Request{Key: r.Key, Slot: r.Slot, Limit: r.Limit}, &q); err != nil {
		return err
	}
	q.lease = strconv.FormatUint(lease, 10)
	if _, err := s.run(ctx, s.call(scripts().release, []request{q}, nil)); err != nil {
		return s.wrap(err, "release", q)
	}
	return nil
}

// wrap names the operation, key and limit in a Redis error.
func (s *Store) wrap(err error, op string, q request) error {
	if strings.Contains(err.Error(), "attempt to perform arithmetic on a string value") {
		// read_state (stateio.lua) found a field that is not a number
		return fmt.Errorf("redisstore: %s %q under %s: a state hash under prefix %q holds a field that is not a number "+
			"(sluice writes only integers: did something else write it?); delete the key to start that limit afresh: %w",
			op, q.Key, q.Limit, s.prefix, err)
	}
	return fmt.Errorf("redisstore: %s %q under %s: %w", op, q.Key, q.Limit, err)
}

// decode reads a script reply into the decisions, and returns the undo
// tokens: 6 integers per request, or 8 values per request when the script
// added each one's lease and undo token (see emit in scripts/reply.lua);
// nil when the reply has none. Every value is checked.
func decode(reply []any, into any) ([]string, error) {
	var set func(k int, d sluice.Decision)
	var n int
	switch v := into.(type) {
	case []sluice.Decision:
		n = len(v)
		set = func(k int, d sluice.Decision) { v[k] = d }
	case decisionView:
		n = len(v.idx)
		set = func(k int, d sluice.Decision) { v.ds[v.idx[k]] = d }
	}
	stride := 6
	if n > 0 && len(reply) == 8*n {
		stride = 8
	}
	if len(reply) != stride*n {
		return nil, fmt.Errorf("%w: %d values for %d requests", errBadReply, len(reply), n)
	}
	var undo []string // only a reply with undo tokens has them
	if stride == 8 {
		undo = make([]string, n)
	}
	for k := range n {
		v := reply[stride*k : stride*k+stride]
		var ints [6]int64
		for j := range ints {
			x, ok := v[j].(int64)
			if !ok {
				return nil, fmt.Errorf("%w: value %d is %T, want an integer", errBadReply, stride*k+j, v[j])
			}
			ints[j] = x
		}
		d := sluice.Decision{
			Allowed:    ints[0] == 1,
			Limit:      ints[1],
			Remaining:  max(0, ints[2]), // a window in debt (Adjust) holds more than its count
			RetryAfter: time.Duration(ints[3]) * time.Microsecond,
			ResetAfter: time.Duration(ints[4]) * time.Microsecond,
			Delay:      time.Duration(ints[5]) * time.Microsecond,
		}
		if stride == 8 {
			lease, ok1 := v[6].(string)
			tok, ok2 := v[7].(string)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("%w: lease or undo token is not a string", errBadReply)
			}
			if lease != "" {
				id, err := strconv.ParseUint(lease, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("%w: lease %q", errBadReply, lease)
				}
				d.Lease = id
			}
			undo[k] = tok
		}
		set(k, d)
	}
	return undo, nil
}

var errBadReply = errors.New("redisstore: unexpected reply from the sluice script")
