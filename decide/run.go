package decide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/deadline"
)

// Config configures a Decider. The zero value is ready to use; each field
// documents its default.
type Config struct {
	// Wait says the front-end holds a request while it waits: Run then
	// sleeps a shaping delay and waits for room under an Action.Wait
	// before it returns. Without it, Run never sleeps: a shaping delay is
	// returned in Result.Decision.Delay for the caller to honour, and an
	// Action.Wait refuses at once.
	Wait bool

	// MaxDelay bounds the shaping delay (leaky_bucket) a request may be
	// given. A longer one is refused. Default 1s.
	MaxDelay time.Duration

	// MaxWaiting bounds how many requests may wait at once under each
	// limit (by name), for a shaping delay or an Action.Wait: a waiting
	// request holds its goroutine, connection and buffers. A request
	// beyond it is refused at once. Default 1000; negative: none waits.
	MaxWaiting int

	// OnError is the failure mode of checks whose own is FailDefault, when
	// the store returns an error for them (a store behind package failover
	// decides failures itself and returns only FailClosed errors).
	// Default FailOpen: admit uncounted, and log.
	OnError sluice.FailureMode

	// Component names the front-end in log lines ("httplimit"). Default
	// "sluice".
	Component string

	// Logger receives the logs: refusals, real and shadow, as one line per
	// second in which there were any (the count per limit and the keys
	// refused most), and errors at most once a second. Default
	// slog.Default().
	Logger *slog.Logger

	// ShowKeys makes refusal logs show key values instead of masks
	// (ShowValue). Keys hold what clients send: addresses, tokens.
	ShowKeys bool

	// KeyText, if set, renders a store key in the refusal logs: a
	// front-end that knows the names of its keys' parts passes the
	// rendering its other surfaces show (KeyText with the names), so that
	// a key reads the same in its logs and on its status page. Default
	// StoreKeyText(key, 0, ShowKeys): every part of the key, masked.
	KeyText func(key string) string

	// OnWaiting, if set, is called with +1 when a request starts waiting
	// under a limit (for a shaping delay or an Action.Wait) and with -1
	// when it stops: a gauge of waiting requests. It must be fast and safe
	// for concurrent use. Default none.
	OnWaiting func(limit string, delta int)

	// Relimit, if set, gives the limit Result.Settle charges a check
	// under: the one its source would plan it under now, which differs
	// from Check.Limit after a reload changed it. Without it (or when it
	// reports none), a check settles under its own Limit, which carries
	// the key's state back to that limit for the one call.
	Relimit Relimiter

	// OnSoft, if set, is called when a charge takes a key from below a
	// check's soft share (Check.Soft) to it or past it: a counter of keys
	// near their budget. It must be fast and safe for concurrent use.
	OnSoft func(c *Check)

	// RelateFor is how long a peek at a related limit (Check.When) is
	// reused for the checks that relate to it, so that a hot relating
	// limit does not double the store calls of its requests. The
	// guarantee: Run decides whether a related limit is busy from a peek
	// sent at most RelateFor before, by the Decider's clock; a busy or
	// idle state older than that is never used. Of concurrent requests
	// that find no fresh peek, each peeks. At most 10,000 related keys
	// are kept. Default 100ms; negative: every relation is peeked anew.
	RelateFor time.Duration
}

// A Relimiter finds the limit a check planned earlier is charged under
// now: the limit of the same name and Override in its source's current
// configuration, when that limit keeps the check's state (the same
// algorithm and Version: sluice.Limit.Shares). ok is false when there is
// none. It must be safe for concurrent use. policy.Policy and
// policy.Holder are Relimiters.
type Relimiter interface {
	Relimit(c *Check) (limit sluice.Limit, ok bool)
}

// Decider runs planned checks: the one path of every front-end. It is safe
// for concurrent use.
type Decider struct {
	limiter       *sluice.Limiter
	cfg           Config
	waiting       waitQueue
	refused       *refusalLog // enforced refusals, logged once per interval
	shadow        *refusalLog // shadow refusals, likewise
	softs         softLimits  // keys passing a soft share
	relations     relationCache
	logMu         sync.Mutex
	lastLog       time.Time // of an error
	lastCapped    time.Time // of a late cost above its max
	lastMalformed time.Time // of a late cost that is not a number
}

// New returns a Decider that charges limiter.
func New(limiter *sluice.Limiter, cfg Config) (*Decider, error) {
	if limiter == nil {
		return nil, errors.New("decide: New: limiter is nil")
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = time.Second
	}
	if cfg.MaxDelay < 0 {
		return nil, fmt.Errorf("decide: MaxDelay must not be negative (got %s)", cfg.MaxDelay)
	}
	if cfg.MaxWaiting == 0 {
		cfg.MaxWaiting = 1000
	}
	if cfg.OnError == sluice.FailDefault {
		cfg.OnError = sluice.FailOpen
	}
	if cfg.Component == "" {
		cfg.Component = "sluice"
	}
	if cfg.RelateFor == 0 {
		cfg.RelateFor = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	dc := &Decider{limiter: limiter, cfg: cfg}
	dc.waiting.max = cfg.MaxWaiting
	dc.relations.ttl = cfg.RelateFor
	dc.waiting.notify = cfg.OnWaiting
	show := cfg.KeyText
	if show == nil {
		show = func(key string) string { return StoreKeyText(key, 0, cfg.ShowKeys) }
	}
	dc.refused = newRefusalLog(cfg.Logger, cfg.Component+": refused requests", show)
	dc.softs = softLimits{on: cfg.OnSoft, logger: cfg.Logger, msg: cfg.Component + ": a key passed a soft limit", show: show}
	dc.shadow = newRefusalLog(cfg.Logger, cfg.Component+": shadow limits would have refused requests", show)
	return dc, nil
}

// MaxDelay is the longest shaping delay the Decider gives a request.
func (dc *Decider) MaxDelay() time.Duration { return dc.cfg.MaxDelay }

// Result is what Run decided for one request. Reuse one across requests
// (Run resets it) to spare allocations; call Release when the request's
// work is done.
type Result struct {
	// Outcome is what happened to the request.
	Outcome Outcome
	// Decision is the binding decision of the enforced checks: the
	// refusal, or the admission closest to refusing (zero when none ran).
	Decision sluice.Decision
	// Decided is the index in Enforced of the check that decided, -1 when
	// none did.
	Decided int
	// Enforced are the enforced checks that ran, and Each their
	// decisions (zero when the store failed).
	Enforced []Check
	Each     []sluice.Decision
	// Shadow are the shadow checks, and ShadowEach their decisions, each
	// checked on its own (zero when it did not run: the request was not
	// admitted, or the store failed).
	Shadow     []Check
	ShadowEach []sluice.Decision
	// Idle are the checks whose related limit was not busy (Check.When):
	// neither checked nor charged, they are in neither Enforced nor
	// Shadow, the RateLimit header fields leave them out, and they are not
	// observed.
	Idle []Check
	// Err is the error of a Failed, AdmittedUncounted or Invalid outcome, or of
	// the first check left out because it could not be planned.
	Err error
	// Observed lists what a front-end reports to metrics and status
	// pages: one observation for the enforced checks (with the check that
	// decided), one per shadow check that ran (ShadowAdmitted,
	// ShadowRefused, or Failed), and one per check left out because it
	// could not be planned.
	Observed []Observation

	dc         *Decider
	leftOut    bool // a check that could not be planned was left out
	settled    bool // Settle has run
	undone     bool // Undo has given back what was charged
	reqs       []sluice.Request
	shadowReqs []sluice.Request
	leases     []lease
}

type lease struct {
	req sluice.Request
	id  uint64
}

// DecidedBy returns the check that decided, or nil.
func (r *Result) DecidedBy() *Check {
	if r.Decided < 0 || r.Decided >= len(r.Enforced) {
		return nil
	}
	return &r.Enforced[r.Decided]
}

// Proceed reports whether the request goes on to its handler or upstream.
func (r *Result) Proceed() bool {
	switch r.Outcome {
	case Admitted, Delayed, AdmittedUncounted:
		return true
	}
	return false
}

// Release gives back the concurrency leases the request holds. Call it when
// its work has ended (httplimit: when the handler returns).
func (r *Result) Release() {
	for _, l := range r.leases {
		r.dc.limiter.Release(context.Background(), l.req, l.id)
	}
	r.leases = r.leases[:0]
}

func (r *Result) reset(dc *Decider) {
	*r = Result{
		Decided: -1, dc: dc,
		Enforced: r.Enforced[:0], Each: r.Each[:0], reqs: r.reqs[:0],
		Shadow: r.Shadow[:0], shadowReqs: r.shadowReqs[:0], ShadowEach: r.ShadowEach[:0], Idle: r.Idle[:0],
		leases: r.leases[:0], Observed: r.Observed[:0],
	}
}

// Run decides a request whose checks a front-end planned: the enforced
// checks in one all-or-nothing check (if any refuses, none is charged),
// then, if the request was admitted, each shadow check on its own. It writes
// what happened into res. A check that could not be planned (Check.Err)
// refuses the request if its failure mode is FailClosed and is left out
// otherwise; a store error is decided by the checks' failure modes, and an
// invalid limit or cost is never admitted.
func (dc *Decider) Run(ctx context.Context, checks []Check, res *Result) {
	res.reset(dc)
	if !dc.split(ctx, checks, res) {
		return
	}
	res.Outcome = Admitted
	if len(res.Enforced) > 0 && !dc.enforce(ctx, res) {
		if res.Outcome == Refused {
			dc.ban(ctx, res)
		}
		return
	}
	dc.softs.request(res)
	if len(res.Shadow) > 0 {
		dc.runShadow(ctx, res)
	}
	if res.Outcome == Admitted && res.leftOut {
		res.Outcome = AdmittedUncounted // not every limit counted it
	}
}

// uncounted reports whether a failure mode admitted any of ds without
// counting it (sluice.Decision.Uncounted).
func uncounted(ds []sluice.Decision) bool {
	for _, d := range ds {
		if d.Uncounted {
			return true
		}
	}
	return false
}

// split sorts checks into enforced, shadow and idle (Check.When), building
// their requests, and deals with the checks that could not be planned. It
// reports whether the request is still to be decided.
func (dc *Decider) split(ctx context.Context, checks []Check, res *Result) bool {
	for i := range checks {
		c := &checks[i]
		if c.Err != nil {
			if ce, ok := AsClientError(c.Err); ok {
				res.Outcome, res.Err = Invalid, ce
				res.observe(Observation{Limit: c.Name, Outcome: Invalid, Err: ce})
				return false
			}
			if dc.mode(c.OnError) == sluice.FailClosed {
				res.Outcome, res.Err = Failed, fmt.Errorf("limit %q: %w", c.Name, c.Err)
				dc.logError("refusing a request whose limit could not be planned (on_error: closed)", res.Err)
				res.observe(Observation{Limit: c.Name, Outcome: Failed, Err: res.Err})
				return false
			}
			err := fmt.Errorf("limit %q: %w", c.Name, c.Err)
			res.leftOut = true
			if res.Err == nil {
				res.Err = err
			}
			dc.logError("leaving out a limit that could not be planned", err)
			res.observe(Observation{Limit: c.Name, Outcome: AdmittedUncounted, Err: err})
			continue
		}
		if !dc.relates(ctx, c) {
			res.Idle = append(res.Idle, *c)
			continue
		}
		r := sluice.Request{Key: c.Key, Slot: c.Slot, Limit: c.Limit, Cost: c.Cost, OnError: c.OnError, MaxDelay: dc.maxDelay(c)}
		if c.Shadow {
			res.Shadow, res.shadowReqs = append(res.Shadow, *c), append(res.shadowReqs, r)
			res.ShadowEach = append(res.ShadowEach, sluice.Decision{})
		} else {
			res.Enforced, res.reqs = append(res.Enforced, *c), append(res.reqs, r)
			res.Each = append(res.Each, sluice.Decision{})
		}
	}
	return true
}

// maxDelay is the longest shaping delay a check may be given: its
// Action's MaxDelay when it waits for room, else Config.MaxDelay. The store
// refuses a longer one without charging it.
func (dc *Decider) maxDelay(c *Check) time.Duration {
	if c.Action != nil && c.Action.Wait && c.Action.MaxDelay > 0 {
		return c.Action.MaxDelay
	}
	return dc.cfg.MaxDelay
}

// noDelay is the MaxDelay of a request that may not be delayed at all: the
// store refuses it, uncharged, if it would be.
const noDelay = time.Nanosecond

// shaper returns the index of the first enforced check whose limit can
// give a shaping delay, or -1.
func shaper(res *Result) int {
	for i := range res.Enforced {
		if algo.Shapes(res.Enforced[i].Limit.Algorithm) {
			return i
		}
	}
	return -1
}

// enforce runs the enforced checks, waits as they and Config.Wait allow,
// and reports whether the request goes on. A request that would be
// delayed takes its place in the waiting line before it is charged: with
// no place left, it may not be delayed, and the store refuses it
// uncharged if it would be.
func (dc *Decider) enforce(ctx context.Context, res *Result) bool {
	line := ""
	if s := shaper(res); s >= 0 && dc.cfg.Wait {
		if name := res.Enforced[s].Name; dc.waiting.enter(name) {
			line = name
			defer func() { dc.waiting.leave(line) }()
		} else {
			for i := range res.reqs {
				res.reqs[i].MaxDelay = noDelay
			}
		}
	}
	d, i, err := dc.limiter.CheckEach(ctx, res.reqs, res.Each)
	if err != nil {
		return dc.failed(res, err)
	}
	waited := false
	if !d.Allowed {
		if d, i, waited, err = dc.waitForRoom(ctx, res, d, i); err != nil {
			return dc.failed(res, err)
		}
	}
	res.Decision, res.Decided = d, i
	c := &res.Enforced[i]
	// A store that honours sluice.Request.MaxDelay never admits a longer
	// delay; one that does not has charged it, and it is refused anyway.
	tooLong := false
	for j := range res.Enforced {
		tooLong = d.Allowed && d.Delay > dc.maxDelay(&res.Enforced[j])
		if !tooLong {
			break
		}
	}
	switch {
	case !d.Allowed || tooLong:
		res.Outcome = Refused
	case waited || d.Delay > 0:
		res.Outcome = Delayed
	case uncounted(res.Each):
		res.Outcome = AdmittedUncounted // a failure mode admitted a limit
	}
	res.observe(Observation{Limit: c.Name, Key: c.Key, Outcome: res.Outcome, Decision: d})
	if d.Allowed {
		res.keepLeases(res.reqs, res.Each)
	}
	if res.Outcome == Refused {
		res.Release() // a delay too long for the front-end: nothing of it goes on
		dc.refused.add(c.Name, c.Key)
		return false
	}
	if d.Delay > 0 && dc.cfg.Wait && deadline.Sleep(ctx, d.Delay) != nil {
		res.Err = ctx.Err()
		return false // the client has gone
	}
	return true
}

// waitForRoom retries a refused check after each RetryAfter until it is
// admitted or the deciding check's Action.MaxDelay has passed, when the
// check asks to wait and the front-end can.
func (dc *Decider) waitForRoom(ctx context.Context, res *Result, d sluice.Decision, i int) (sluice.Decision, int, bool, error) {
	c := &res.Enforced[i]
	a := c.Action
	if !dc.cfg.Wait || a == nil || !a.Wait || d.RetryAfter > a.MaxDelay || !dc.waiting.enter(c.Name) {
		return d, i, false, nil
	}
	defer dc.waiting.leave(c.Name)
	end := time.Now().Add(a.MaxDelay)
	for !d.Allowed && time.Now().Add(d.RetryAfter).Before(end.Add(time.Millisecond)) {
		if deadline.Sleep(ctx, d.RetryAfter) != nil {
			return d, i, false, nil // the client has gone; refused, nothing charged
		}
		var err error
		if d, i, err = dc.limiter.CheckEach(ctx, res.reqs, res.Each); err != nil {
			return d, i, false, err
		}
	}
	return d, i, d.Allowed, nil
}

// failed decides a request whose enforced check returned an error, and
// reports whether it goes on. An invalid limit or cost never admits; a
// store error refuses if any check's failure mode is closed and admits
// uncounted otherwise.
func (dc *Decider) failed(res *Result, err error) bool {
	res.Err = err
	name := res.Enforced[0].Name
	if sluice.IsRequestError(err) {
		res.Outcome = Failed
		dc.logError("refusing a request whose limits the store cannot check (a configuration error)", err)
		res.observe(Observation{Limit: name, Outcome: Failed, Err: err})
		return false
	}
	for i := range res.Enforced {
		if dc.mode(res.Enforced[i].OnError) == sluice.FailClosed {
			res.Outcome = Failed
			dc.logError("refusing a request the store could not decide (on_error: closed)", err)
			res.observe(Observation{Limit: res.Enforced[i].Name, Outcome: Failed, Err: err})
			return false
		}
	}
	res.Outcome = AdmittedUncounted
	dc.logError("admitting a request the store could not decide (on_error: open)", err)
	res.observe(Observation{Limit: name, Outcome: AdmittedUncounted, Err: err})
	return true
}

func (dc *Decider) mode(m sluice.FailureMode) sluice.FailureMode {
	if m == sluice.FailDefault {
		return dc.cfg.OnError
	}
	return m
}

// runShadow runs the shadow checks of an admitted request, each on its
// own: a shadow limit reports what it would do if it alone were enforced,
// so one tight shadow limit does not hide what another would refuse. They
// never change what happens to the request: a refusal is observed and
// logged, an error only logged (its decision is left zero).
func (dc *Decider) runShadow(ctx context.Context, res *Result) {
	for i := range res.Shadow {
		c := &res.Shadow[i]
		d, _, err := dc.limiter.CheckEach(ctx, res.shadowReqs[i:i+1], res.ShadowEach[i:i+1])
		switch {
		case err != nil:
			res.ShadowEach[i] = sluice.Decision{}
			dc.logError("a shadow limit could not be checked", err)
			res.observe(Observation{Limit: c.Name, Key: c.Key, Outcome: Failed, Err: err})
		case d.Allowed:
			res.keepLeases(res.shadowReqs[i:i+1], res.ShadowEach[i:i+1]) // shadow concurrency limits hold leases too
			res.observe(Observation{Limit: c.Name, Key: c.Key, Outcome: ShadowAdmitted, Decision: d})
		default:
			dc.shadow.add(c.Name, c.Key)
			res.observe(Observation{Limit: c.Name, Key: c.Key, Outcome: ShadowRefused, Decision: d})
		}
	}
}

func (r *Result) keepLeases(reqs []sluice.Request, ds []sluice.Decision) {
	for i, d := range ds {
		if d.Lease != 0 {
			r.leases = append(r.leases, lease{reqs[i], d.Lease})
		}
	}
}

func (r *Result) observe(o Observation) { r.Observed = append(r.Observed, o) }

// logError logs err at most once a second.
func (dc *Decider) logError(msg string, err error) {
	dc.logRare(&dc.lastLog, msg, "err", err)
}

// logRare logs a warning unless one was logged at last less than a second
// ago.
func (dc *Decider) logRare(last *time.Time, msg string, args ...any) {
	dc.logMu.Lock()
	now := time.Now()
	due := now.Sub(*last) >= time.Second
	if due {
		*last = now
	}
	dc.logMu.Unlock()
	if due {
		dc.cfg.Logger.Warn(dc.cfg.Component+": "+msg, args...)
	}
}
