// Package failover keeps sluice deciding when its shared store (Redis)
// fails: a sluice.Store that wraps the primary store with a deadline on
// every call and a circuit breaker, and decides by a failure Mode what
// happens to a request the primary cannot decide.
//
// Every call to the primary gets a deadline (Config.Timeout, 50 ms by
// default). The breaker counts the calls that fail, and opens after
// Config.ConsecutiveFailures failures in a row or when failures reach
// Config.FailureRatio of at least Config.MinCalls calls within
// Config.Window. Calls that fail together count once: a failure counts
// only if its call started after the last failure that counted was seen,
// so that a short stall of the primary, which fails every call in flight
// at once, is one failure and not an open breaker; a primary that keeps
// failing adds one failure per deadline (or per refused dial) and opens the
// breaker within ConsecutiveFailures of them. While it is open, calls do
// not reach the primary at all.
// Once Config.ProbeInterval has passed, one call at a time goes through
// as a probe: its success closes the breaker, its failure opens it for
// another interval.
//
// What counts as a failure: a deadline that passed, a connection error,
// and every error reply of the store (LOADING, READONLY, CLUSTERDOWN,
// MASTERDOWN, TRYAGAIN, ...). What does not: errors about the request
// itself (sluice.IsRequestError), which are returned as they are because
// no store could decide such a request, and the end of the caller's own
// context.
// redisstore already reloads its scripts on NOSCRIPT (after a restart or
// SCRIPT FLUSH), and go-redis's ClusterClient follows MOVED and ASK, so
// neither reaches the breaker.
//
// What the primary can decide in the process, without I/O, it decides
// first, outside the breaker and the deadline: a request its quota lease
// covers (redisstore with Config.Leases: units Redis counted when it
// handed them out, so the decision is exact, not degraded), or, for a
// limit a lease can cover, a refusal its near cache remembers. Such an
// answer is not a call: it costs no clock reading and no deadline, and the
// breaker judges Redis by the calls that reach it, so a lease that covers
// most requests cannot keep a failing Redis's breaker closed. While the
// breaker is open, an instance thus spends what it holds before falling
// back. A request whose call to the primary failed is offered to the
// leases once more (one may have been refilled while the call waited).
// Any other request the primary could not decide, because the breaker is
// open or its call failed, is decided by its Mode (Config.Mode):
//
//	Fallback    decide it with a local memstore, its limit scaled by
//	            Config.FallbackScale (Decision.Degraded); the default. The
//	            memstore sees the traffic the primary decides too, so its
//	            counts are warm when the primary fails, and what it admits
//	            is charged to the primary once the primary answers again
//	FailOpen    admit it, counting nothing (Decision.Degraded and Uncounted)
//	FailClosed  return an error wrapping ErrUnavailable: httplimit answers
//	            503 with Retry-After set to the breaker's next probe
//
// Wiring it to Redis (a *redis.Client, a Sentinel client from
// redis.NewFailoverClient, or a *redis.ClusterClient):
//
//	rdb := redis.NewClient(&redis.Options{
//		Addr:        "redis:6379",
//		ReadTimeout: 200 * time.Millisecond, // frees pipelines stuck on a hung server
//		WriteTimeout: 200 * time.Millisecond,
//	})
//	primary, err := redisstore.New(rdb, redisstore.Config{})
//	...
//	store, err := failover.New(primary, failover.Config{
//		Mode:          func(sluice.Request) failover.Mode { return failover.Fallback },
//		FallbackScale: 1.0 / 4, // four instances share the limit while Redis is down
//	})
//	...
//	limiter := sluice.New(store)
//
// A request that carries its own mode (sluice.Request.OnError, which package
// policy sets from each rule's on_error) is decided by that mode; Config.Mode
// picks the mode of the others. docs/operations.md discusses what each mode
// trades and how to choose the settings.
package failover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/deadline"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// Mode says what happens to a request when the primary store cannot
// decide it: sluice.FailureMode, which each sluice.Request carries in its
// OnError field. A request whose OnError is sluice.FailDefault gets the
// mode Config.Mode picks for it.
type Mode = sluice.FailureMode

const (
	// FailOpen admits the request without counting it: availability over
	// the limit. The decision has Allowed, Degraded and Uncounted set, Limit the
	// limit's capacity and Remaining as for a key with no history.
	FailOpen = sluice.FailOpen
	// FailClosed refuses the request with an error that wraps
	// ErrUnavailable: the limit over availability.
	FailClosed = sluice.FailClosed
	// Fallback decides the request with a local store (by default a
	// memstore), under the request's limit scaled by Config.FallbackScale:
	// each instance enforces its share of the limit on its own. The local
	// store also sees every Fallback request the primary decides, as if it
	// had decided it alone (its answer is not used), so that it starts an
	// outage from the counts of recent traffic, not from empty ones; and
	// what it admits is charged to the primary after the primary's next
	// success, so that a limit whose counts refilled meanwhile does not
	// admit the outage's requests a second time. The default mode.
	Fallback = sluice.FailFallback
)

// ParseMode returns the Mode named "open", "closed" or "fallback".
func ParseMode(s string) (Mode, error) {
	m, err := sluice.ParseFailureMode(s)
	if err != nil || m == sluice.FailDefault {
		return 0, fmt.Errorf("failover: unknown mode %q (want open, closed or fallback)", s)
	}
	return m, nil
}

// ErrUnavailable is wrapped by the error a FailClosed request gets when the
// primary store cannot decide it. The error also has a method
// RetryAfter() time.Duration, the time until the breaker's next probe
// (zero if it is not open), which httplimit sends as Retry-After.
var ErrUnavailable = errors.New("failover: the rate limit store is unavailable")

type unavailableError struct {
	retry time.Duration
	cause error
}

func (e *unavailableError) Error() string {
	if e.cause == nil {
		return ErrUnavailable.Error() + " (circuit breaker open)"
	}
	return ErrUnavailable.Error() + ": " + e.cause.Error()
}

func (e *unavailableError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrUnavailable}
	}
	return []error{ErrUnavailable, e.cause}
}

// RetryAfter is the time until the breaker lets a probe through.
func (e *unavailableError) RetryAfter() time.Duration { return e.retry }

// Config configures a Store. The zero value is ready to use; each field
// documents its default.
type Config struct {
	// Timeout is the deadline of every call to the primary (Take, TakeAll,
	// Release); a call that has not answered by then counts as a failure
	// and its request is decided by its Mode. A shorter deadline of the
	// caller's context still applies, but its end is the caller's, not a
	// failure. Default 50ms; negative: no deadline besides the caller's.
	Timeout time.Duration

	// ConsecutiveFailures opens the breaker after this many failed calls
	// in a row, each made after the one before had failed (calls that
	// fail together count once). With calls that time out, that takes
	// ConsecutiveFailures-1 deadlines of failing: 200 ms and more with the
	// defaults. Default 5; negative: never for this reason.
	ConsecutiveFailures int

	// FailureRatio opens the breaker when at least this fraction of the
	// calls within Window failed, once there were MinCalls of them, which
	// catches a primary that fails often but not always in a row.
	// Default 0.5; negative: never for this reason. At most 1.
	FailureRatio float64

	// MinCalls is the fewest calls within Window that FailureRatio
	// judges. Default 20.
	MinCalls int

	// Window is the time over which FailureRatio is counted, sliding in
	// tenths. Default 10s.
	Window time.Duration

	// ProbeInterval is how long the breaker stays open before it lets one
	// call through as a probe, and again after each failed probe.
	// Default 1s.
	ProbeInterval time.Duration

	// Mode picks the failure mode of a request whose OnError is
	// sluice.FailDefault; it is called for every such request (the
	// fallback store sees Fallback requests while the primary answers
	// too). A request that names its own mode (a policy rule's on_error)
	// gets that mode. Default: Fallback, so that no default admits
	// without a bound.
	Mode func(sluice.Request) Mode

	// FallbackScale multiplies the counts of a Fallback request's limit
	// (count, burst, queue, concurrency) before the fallback store decides
	// it: 1/N when N instances share the limit, more to be looser. Counts
	// never go below 1; a scaled limit that would be invalid is not scaled;
	// a cost above the scaled limit's capacity is charged as that capacity.
	// Store.SetFallbackScale changes it later. Default 1.
	FallbackScale float64

	// FallbackStore decides Fallback requests, and sees those the primary
	// decides too (see Fallback). Default: a memstore with its default
	// bound on keys, created by New and closed by Close.
	FallbackStore sluice.Store

	// OnStateChange, if set, is called on every change of the breaker's
	// state, in order, outside the Store's lock; it must not block long.
	OnStateChange func(from, to State)

	// Logger receives one line per change of the breaker's state (open at
	// Warn, closed at Info, half-open at Debug), never one per request.
	// Default slog.Default().
	Logger *slog.Logger
}

// Stats are a Store's counters since New, for metrics.
type Stats struct {
	// Calls is how many calls (Take, TakeAll, Release) reached the primary.
	// A request the primary decided from what it holds in the process (a
	// quota lease, its near cache) is not one: redisstore's LeaseStats
	// counts those.
	Calls int64
	// Failures is how many of those failed, as the breaker classifies
	// failures; the calls that failed together are each counted here,
	// though the breaker counts them once.
	Failures int64
	// ShortCircuited is how many calls did not reach the primary because
	// the breaker was open (or half-open with its probe in flight).
	ShortCircuited int64
	// Opens is how many times the breaker opened.
	Opens int64
	// DegradedOpen, DegradedClosed and DegradedFallback count the requests
	// decided by each Mode: admitted uncounted, refused with
	// ErrUnavailable, and decided by the fallback store.
	DegradedOpen, DegradedClosed, DegradedFallback int64
}

// Store is a sluice.Store that sends calls to a primary store through a
// deadline and a circuit breaker, and decides the requests the primary
// cannot by their failure Mode. It is safe for concurrent use. Its state is
// one mutex-guarded breaker, taken twice per call; it starts no goroutines.
type Store struct {
	primary, fallback sluice.Store
	local             *redisstore.Store // primary, if it is one (see takeLocal)
	own               *memstore.Store   // the default fallback, closed by Close
	cfg               Config

	mu     sync.Mutex
	br     breaker
	hookMu sync.Mutex // keeps OnStateChange calls in the order of the changes
	state  atomic.Uint32
	// gate and lastFail mirror the breaker for the calls that need not
	// take mu (see setGate), as times in ns since born (see mono);
	// lastFail 0 for none.
	gate, lastFail atomic.Int64
	born           time.Time

	debts debts                  // what the fallback admitted, owed to the primary
	scale atomic.Pointer[scaled] // the fallback scale and the limits scaled under it

	calls, failures, shorted, opens atomic.Int64
	degraded                        [4]atomic.Int64 // by Mode
}

var _ sluice.Store = (*Store)(nil)

// New returns a Store in front of primary, configured by cfg.
func New(primary sluice.Store, cfg Config) (*Store, error) {
	if primary == nil {
		return nil, errors.New("failover: New: primary store is nil")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{primary: primary, fallback: cfg.FallbackStore, cfg: cfg, born: time.Now()}
	s.local, _ = primary.(*redisstore.Store)
	s.debts.closing = make(chan struct{})
	s.scale.Store(&scaled{f: cfg.FallbackScale})
	if s.fallback == nil {
		own, err := memstore.New(memstore.Config{})
		if err != nil {
			return nil, fmt.Errorf("failover: fallback store: %w", err)
		}
		s.own, s.fallback = own, own
	}
	s.br = breaker{
		consecutive: max(0, cfg.ConsecutiveFailures),
		ratio:       max(0, cfg.FailureRatio),
		minCalls:    max(1, cfg.MinCalls),
		width:       cfg.Window / buckets,
		interval:    cfg.ProbeInterval,
	}
	return s, nil
}

// withDefaults returns cfg with its zero fields set to their defaults, or
// the error of a field out of range.
func (cfg Config) withDefaults() (Config, error) {
	def := func(d *time.Duration, v time.Duration, name string) error {
		if *d == 0 {
			*d = v
		}
		if *d < 0 {
			return fmt.Errorf("failover: %s must not be negative (got %s)", name, *d)
		}
		return nil
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 50 * time.Millisecond
	}
	if err := def(&cfg.Window, 10*time.Second, "Window"); err != nil {
		return cfg, err
	}
	if err := def(&cfg.ProbeInterval, time.Second, "ProbeInterval"); err != nil {
		return cfg, err
	}
	if cfg.ConsecutiveFailures == 0 {
		cfg.ConsecutiveFailures = 5
	}
	if cfg.FailureRatio == 0 {
		cfg.FailureRatio = 0.5
	}
	if cfg.FailureRatio > 1 || math.IsNaN(cfg.FailureRatio) {
		return cfg, fmt.Errorf("failover: FailureRatio must be at most 1 (got %v); make it negative to open on consecutive failures only", cfg.FailureRatio)
	}
	if cfg.MinCalls == 0 {
		cfg.MinCalls = 20
	}
	if cfg.MinCalls < 0 {
		return cfg, fmt.Errorf("failover: MinCalls must not be negative (got %d)", cfg.MinCalls)
	}
	if cfg.Window < buckets*time.Microsecond {
		return cfg, fmt.Errorf("failover: Window %s is too short (at least %s)", cfg.Window, buckets*time.Microsecond)
	}
	if cfg.FallbackScale == 0 {
		cfg.FallbackScale = 1
	}
	if err := checkScale(cfg.FallbackScale); err != nil {
		return cfg, err
	}
	if cfg.Mode == nil {
		cfg.Mode = func(sluice.Request) Mode { return Fallback }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}

// Close stops charging the primary for what the fallback admitted and
// closes the fallback store if New created it. It does not close the
// primary store, nor a FallbackStore given in Config; close the primary
// after the Store.
func (s *Store) Close() error {
	s.debts.stop()
	if s.own != nil {
		return s.own.Close()
	}
	return nil
}

// FallbackScale returns the scale of the limits the fallback store
// decides: Config.FallbackScale, or what SetFallbackScale set last.
func (s *Store) FallbackScale() float64 { return s.scale.Load().f }

// SetFallbackScale changes the scale of the limits the fallback store
// decides, for example to 1/N when a count of the instances sharing the
// primary finds N of them. The fallback keeps counts per limit, so the
// keys it holds start afresh under the new scale, and a fallback lease
// granted before the change ends by its TTL rather than its release.
func (s *Store) SetFallbackScale(f float64) error {
	if err := checkScale(f); err != nil {
		return err
	}
	s.scale.Store(&scaled{f: f})
	return nil
}

func checkScale(f float64) error {
	if !(f > 0) || math.IsInf(f, 0) || f > 1e6 {
		return fmt.Errorf("failover: FallbackScale must be above 0 and at most 1e6 (got %v)", f)
	}
	return nil
}

// State returns the breaker's current state.
func (s *Store) State() State { return State(s.state.Load()) }

// Stats returns the Store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Calls:            s.calls.Load(),
		Failures:         s.failures.Load(),
		ShortCircuited:   s.shorted.Load(),
		Opens:            s.opens.Load(),
		DegradedOpen:     s.degraded[FailOpen].Load(),
		DegradedClosed:   s.degraded[FailClosed].Load(),
		DegradedFallback: s.degraded[Fallback].Load(),
	}
}

// Take decides r on the primary, or by r's Mode when the primary cannot.
// What the primary decides from what it holds in the process (redisstore's
// quota leases and near cache) is decided first, outside the breaker and
// the deadline (see takeLocal).
func (s *Store) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	var p redisstore.Prepared
	if d, ok := s.takeLocal(ctx, r, &p); ok {
		return d, nil
	}
	start, probe, ok := s.admit()
	if !ok {
		return s.degradedOne(ctx, r, nil)
	}
	cctx, stop := s.deadline(ctx, start)
	d, err := s.takePrimary(cctx, r, &p)
	stop.Stop()
	switch err = s.finish(ctx, cctx, err, start, probe); {
	case err == nil:
		if s.shadows(r) {
			s.fallback.Take(ctx, s.fallbackRequest(r)) // see shadow
		}
		return d, nil
	case !isFailure(err):
		return d, err
	}
	return s.degradedOne(ctx, r, err)
}

// TakeAll decides rs all-or-nothing on the primary. When the primary
// cannot decide them, their Modes decide together, still all-or-nothing:
// if any request is FailClosed, the whole check fails with ErrUnavailable
// and nothing is charged anywhere; otherwise the Fallback requests are
// decided together by the fallback store (all-or-nothing among them) and
// the FailOpen ones are admitted uncounted, so the check is admitted
// exactly when the fallback store admits its part.
func (s *Store) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	if len(ds) != len(rs) {
		return fmt.Errorf("failover: TakeAll: %d requests but room for %d decisions", len(rs), len(ds))
	}
	var p redisstore.Prepared
	if s.takeAllLocal(ctx, rs, ds, &p) {
		return nil
	}
	start, probe, ok := s.admit()
	if !ok {
		return s.degradedAll(ctx, rs, ds, nil)
	}
	cctx, stop := s.deadline(ctx, start)
	err := s.takeAllPrimary(cctx, rs, ds, &p)
	stop.Stop()
	switch err = s.finish(ctx, cctx, err, start, probe); {
	case err == nil:
		s.shadow(ctx, rs)
		return nil
	case !isFailure(err):
		return err
	}
	return s.degradedAll(ctx, rs, ds, err)
}

// fallbackLease marks the leases of the fallback store, so that Release
// returns each lease to the store that granted it. Neither memstore nor
// redisstore grants leases this large (memstore counts from 1, redisstore
// from the Unix time in nanoseconds).
const fallbackLease = 1 << 63

// Release gives a concurrency lease back to the store that granted it: the
// fallback store for a lease granted while degraded, the primary otherwise.
// A lease of 0 (a FailOpen admission holds none) is ignored. While the
// breaker is open, a primary lease is not released: the error wraps
// ErrUnavailable and the lease ends by its TTL.
func (s *Store) Release(ctx context.Context, r sluice.Request, lease uint64) error {
	switch {
	case lease == 0:
		return nil
	case lease&fallbackLease != 0:
		return s.fallback.Release(ctx, s.fallbackRequest(r), lease&^fallbackLease)
	}
	start, probe, ok := s.admit()
	if !ok {
		return s.unavailable(nil)
	}
	cctx, stop := s.deadline(ctx, start)
	err := s.primary.Release(cctx, r, lease)
	stop.Stop()
	if err = s.finish(ctx, cctx, err, start, probe); err != nil && isFailure(err) {
		return fmt.Errorf("failover: release %q: the lease ends by its TTL: %w", r.Key, err)
	}
	return err
}

var _ sluice.Resetter = (*Store)(nil)

// Reset forgets the state of r's key under r.Limit in the primary and in
// the fallback (under its scaled limit), each store that is a
// sluice.Resetter. A primary that is not, or fails, is an error: the state
// may remain.
func (s *Store) Reset(ctx context.Context, r sluice.Request) error {
	var errs []error
	if f, ok := s.fallback.(sluice.Resetter); ok {
		errs = append(errs, f.Reset(ctx, s.fallbackRequest(r)))
	}
	p, ok := s.primary.(sluice.Resetter)
	if !ok {
		return errors.Join(append(errs, fmt.Errorf("failover: reset %q: the primary store cannot reset a key", r.Key))...)
	}
	cctx, stop := s.deadline(ctx, time.Now())
	defer stop.Stop()
	if err := p.Reset(cctx, r); err != nil {
		errs = append(errs, fmt.Errorf("failover: reset %q: %w", r.Key, err))
	}
	return errors.Join(errs...)
}

// admit asks the breaker whether a call may go to the primary, and returns
// when it asked. While the breaker is closed, or open before its next
// probe, or half-open with its probe in flight, the gate answers without
// the breaker's lock (see gate).
func (s *Store) admit() (start time.Time, probe, ok bool) {
	start = time.Now()
	switch g := s.gate.Load(); {
	case g == gateClosed:
		s.calls.Add(1)
		return start, false, true
	case g > 0 && s.mono(start) < g:
		s.shorted.Add(1)
		return start, false, false
	}
	s.mu.Lock()
	start = time.Now()
	ok, probe, t := s.br.allow(start)
	s.setGate()
	if !ok {
		s.mu.Unlock()
		s.shorted.Add(1)
		return start, false, false
	}
	s.changed(t) // unlocks s.mu
	s.calls.Add(1)
	return start, probe, true
}

// gateClosed is the gate of a closed breaker.
const gateClosed = 0

// setGate publishes what admit and finish may decide without s.mu, which
// the caller holds: gateClosed while the breaker is closed; while it is
// open, the time of its next probe (see mono), before which every call is
// short-circuited; while half-open with a probe in flight, the end of
// time; otherwise -1, which sends admit to the breaker. Under load, every
// caller queued on the breaker's lock costs each holder a pass of the
// scheduler's run queue when it hands the lock on (a Go mutex in
// starvation mode yields to the waiter), so a lock taken by every call
// made callers wait seconds beyond their deadline on a saturated machine.
func (s *Store) setGate() {
	b := &s.br
	switch {
	case b.state == StateClosed:
		s.gate.Store(gateClosed)
	case b.state == StateOpen:
		s.gate.Store(max(1, s.mono(b.nextProbe)))
	case b.probing:
		s.gate.Store(math.MaxInt64)
	default:
		s.gate.Store(-1)
	}
	if b.lastFail.IsZero() {
		s.lastFail.Store(0)
	} else {
		s.lastFail.Store(s.mono(b.lastFail))
	}
}

// mono is t in ns since New, on the monotonic clock.
func (s *Store) mono(t time.Time) int64 { return int64(t.Sub(s.born)) }

// deadline is ctx bounded by Config.Timeout from start, the time admit
// read (a call is timed from there: one clock reading for both). Its timer
// starts only when the primary waits on it (see internal/deadline): a
// near-cache answer or a quota lease starts none. Its Stop is a method of
// the context itself, not a func value, so that a call allocates the
// context alone.
func (s *Store) deadline(ctx context.Context, start time.Time) (context.Context, stopper) {
	if s.cfg.Timeout < 0 {
		return ctx, noDeadline{}
	}
	c := deadline.New(ctx, start.Add(s.cfg.Timeout))
	return c, c
}

// stopper ends a call's deadline.
type stopper interface{ Stop() }

// noDeadline is the stopper of a call without a deadline (Timeout < 0).
type noDeadline struct{}

func (noDeadline) Stop() {}

// storeFailure marks an error the breaker counted as a failure.
type storeFailure struct{ err error }

func (e *storeFailure) Error() string { return e.err.Error() }
func (e *storeFailure) Unwrap() error { return e.err }

func isFailure(err error) bool {
	var f *storeFailure
	return errors.As(err, &f)
}

// finish classifies the outcome of a call to the primary, records it, and
// returns err, marked as a failure if it is one.
func (s *Store) finish(ctx, cctx context.Context, err error, start time.Time, probe bool) error {
	o := classify(ctx, cctx, err)
	if o == failure {
		s.failures.Add(1)
		if cctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("the store did not answer within %s: %w", s.cfg.Timeout, err)
		}
		err = &storeFailure{err}
	}
	if probe || !s.ignored(o, start) {
		s.record(o, start, probe)
	}
	if o == success {
		s.settle() // after the breaker has closed, if this was its probe
	}
	return err
}

// record shows the breaker the outcome o of a call that started at start:
// under s.mu, but for a success of a closed breaker in a slot of its
// window that has one already (breaker.succeed), which every core counts
// without the lock.
func (s *Store) record(o outcome, start time.Time, probe bool) {
	now := time.Now()
	if o == success && !probe && s.br.succeed(now) {
		return
	}
	s.mu.Lock()
	t := s.br.record(now, start, o, probe)
	s.setGate()
	s.changed(t) // unlocks s.mu
}

// ignored reports, without s.mu, whether the breaker would ignore outcome
// o of a call (not a probe) that started at start (see breaker.record): a
// neutral one, any while the breaker is not closed, and a failure of a
// call in flight when the last failure that counted was seen, as are most
// of a stall's. The gate and lastFail may be a moment old: a call that
// ends as the breaker changes is one record neither gains nor loses from.
func (s *Store) ignored(o outcome, start time.Time) bool {
	return o == neutral || s.gate.Load() != gateClosed ||
		o == failure && s.mono(start) < s.lastFail.Load()
}

// classify says whether err is the store's failure. The caller's own
// cancellation and errors about the request itself are not.
func classify(ctx, cctx context.Context, err error) outcome {
	switch {
	case err == nil:
		return success
	case ctx.Err() != nil:
		return neutral // the caller gave up or its own deadline passed
	case sluice.IsRequestError(err), errors.Is(err, sluice.ErrWouldExceedDeadline):
		return neutral // about the request, or the caller's deadline
	}
	return failure
}

// changed reports a transition to the hook and the log, in order, and
// unlocks s.mu, which the caller holds.
func (s *Store) changed(t *transition) {
	if t == nil {
		s.mu.Unlock()
		return
	}
	s.state.Store(uint32(t.to))
	if t.to == StateOpen {
		s.opens.Add(1)
	}
	s.hookMu.Lock()
	s.mu.Unlock()
	defer s.hookMu.Unlock()
	switch t.to {
	case StateOpen:
		s.cfg.Logger.Warn("failover: circuit breaker opened; requests are decided by their failure mode until a probe succeeds",
			"from", t.from.String(), "reason", t.reason, "next_probe", t.next.Format(time.RFC3339Nano))
	case StateClosed:
		s.cfg.Logger.Info("failover: circuit breaker closed; the primary store decides again", "from", t.from.String())
	default:
		s.cfg.Logger.Debug("failover: circuit breaker half-open; probing the primary store", "from", t.from.String())
	}
	if s.cfg.OnStateChange != nil {
		s.cfg.OnStateChange(t.from, t.to)
	}
}

func (s *Store) unavailable(cause error) error {
	s.mu.Lock()
	retry := s.br.retryAfter(time.Now())
	s.mu.Unlock()
	if f, ok := cause.(*storeFailure); ok {
		cause = f.err
	}
	return &unavailableError{retry: retry, cause: cause}
}

// degradedOne decides r by its Mode; cause is the primary's error, or nil
// if the breaker kept the call from the primary. After a failed call, what
// the primary holds is asked again first: a lease may have been refilled
// while the call waited (the request is prepared again: the failed call
// cost far more).
func (s *Store) degradedOne(ctx context.Context, r sluice.Request, cause error) (sluice.Decision, error) {
	if cause != nil && s.local != nil {
		var p redisstore.Prepared
		if d, ok := s.local.TakeLocal(r, &p); ok {
			return d, nil
		}
	}
	m, err := s.degradedMode(r, cause)
	if err != nil {
		return sluice.Decision{}, err
	}
	if m == Fallback {
		d, err := s.fallback.Take(ctx, s.fallbackRequest(r))
		if err != nil {
			return sluice.Decision{}, fmt.Errorf("failover: fallback store: %w", err)
		}
		if d.Allowed {
			s.debts.add(r)
		}
		return marked(d), nil
	}
	return admitted(r), nil
}

// degradedMode counts r as decided without the primary and returns its
// Mode; under FailClosed, with the error r gets (see unavailable).
func (s *Store) degradedMode(r sluice.Request, cause error) (Mode, error) {
	m := s.mode(r)
	s.degraded[m].Add(1)
	if m == FailClosed {
		return m, s.unavailable(cause)
	}
	return m, nil
}

func (s *Store) degradedAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision, cause error) error {
	if cause != nil && s.local != nil {
		var p redisstore.Prepared
		if s.local.TakeAllLocal(rs, ds, &p) { // see degradedOne
			return nil
		}
	}
	modes := make([]Mode, len(rs))
	var n [4]int64
	for i, r := range rs {
		modes[i] = s.mode(r)
		n[modes[i]]++
	}
	if n[FailClosed] > 0 {
		s.degraded[FailClosed].Add(int64(len(rs))) // the whole check is refused
		return s.unavailable(cause)
	}
	s.degraded[FailOpen].Add(n[FailOpen])
	s.degraded[Fallback].Add(n[Fallback])
	var frs []sluice.Request
	var fidx []int
	for i, r := range rs {
		if modes[i] == Fallback {
			frs, fidx = append(frs, s.fallbackRequest(r)), append(fidx, i)
		} else {
			ds[i] = admitted(r)
		}
	}
	fds, err := s.decideLocally(ctx, frs)
	if err != nil {
		return fmt.Errorf("failover: fallback store: %w", err)
	}
	for k, i := range fidx {
		ds[i] = marked(fds[k])
		if fds[k].Allowed {
			s.debts.add(rs[i])
		}
	}
	return nil
}

// decideLocally decides frs (fallback requests, already scaled) on the
// fallback store, all or nothing.
func (s *Store) decideLocally(ctx context.Context, frs []sluice.Request) ([]sluice.Decision, error) {
	switch len(frs) {
	case 0:
		return nil, nil
	case 1:
		d, err := s.fallback.Take(ctx, frs[0])
		return []sluice.Decision{d}, err
	}
	fds := make([]sluice.Decision, len(frs))
	return fds, s.fallback.TakeAll(ctx, frs, fds)
}

// shadow shows the fallback store the Fallback requests of rs, which the
// primary has just decided, as if it had decided them alone, and ignores
// its answer: the fallback limiter keeps running while the primary
// answers, so when the primary fails it goes on from the counts of the
// traffic it has seen instead of from empty ones (a full burst more per
// instance at every stall). It costs a local decision per request and
// holds the keys of Fallback requests in the fallback store (within its
// bound). Concurrency limits are left out: their leases would never be
// released.
func (s *Store) shadow(ctx context.Context, rs []sluice.Request) {
	var frs []sluice.Request
	for _, r := range rs {
		if s.shadows(r) {
			frs = append(frs, s.fallbackRequest(r))
		}
	}
	s.decideLocally(ctx, frs) // its answer is not the decision; an error changes nothing
}

// shadows reports whether the fallback store is shown r (see shadow).
func (s *Store) shadows(r sluice.Request) bool {
	return !algo.Leases(r.Limit.Algorithm) && s.mode(r) == Fallback
}

func (s *Store) mode(r sluice.Request) Mode {
	m := r.OnError
	if m == sluice.FailDefault {
		m = s.cfg.Mode(r)
	}
	if m == sluice.FailDefault || m > Fallback {
		return FailOpen // an unknown mode; ParseMode never makes one
	}
	return m
}

// fallbackRequest is r under its scaled limit, its cost capped at the
// scaled limit's capacity.
func (s *Store) fallbackRequest(r sluice.Request) sluice.Request {
	r.Limit = s.scale.Load().limit(r.Limit)
	r.Cost = min(r.Cost, r.Limit.Capacity())
	return r
}

// marked marks a fallback decision as degraded and its lease as the
// fallback store's.
func marked(d sluice.Decision) sluice.Decision {
	d.Degraded = true
	if d.Lease != 0 {
		d.Lease |= fallbackLease
	}
	return d
}

// admitted is a FailOpen decision: admitted, nothing counted.
func admitted(r sluice.Request) sluice.Decision {
	c := r.Limit.Capacity()
	return sluice.Decision{Allowed: true, Degraded: true, Uncounted: true, Limit: c, Remaining: max(0, c-r.Cost)}
}
