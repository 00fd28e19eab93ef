// Package replay replays access logs through a policy and suggests
// limits from them: sluice replay and sluice suggest. Each logged request
// is decided as sluice serve would decide it (the same plan and decision
// path, decide), on memstores whose clock is the log's time; a second
// limiter measures each key's peak under unbounded limits of the same
// windows. A Report holds what was found in bounded memory (MaxKeys) and
// writes it as text, CSV or SVG; Suggest sizes limits from the peaks.
package replay

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/accesslog"
	"github.com/sluicehq/sluice/internal/algo"
	sim "github.com/sluicehq/sluice/internal/simulate"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/policy"
)

// Input is the log to replay and how to read it: the flags sluice replay
// and sluice suggest share (--log, --format, --field, --max-keys).
type Input struct {
	Log, Format string
	Fields      accesslog.Fields
	MaxKeys     int
}

// Check refuses flags that cannot work, before any file is read.
func (f *Input) Check() error {
	if f.Log == "" {
		return fmt.Errorf("--log: name the access log to replay")
	}
	if f.MaxKeys < 100 {
		return fmt.Errorf("--max-keys %d: want at least 100", f.MaxKeys)
	}
	if _, err := accesslog.OpenFormat(f.Format, nil, f.Fields); err != nil && f.Format != "auto" {
		return err
	}
	return nil
}

// Run replays the log rf names through p.
func Run(rf *Input, p *policy.Policy) (*Report, error) {
	rc, format, err := accesslog.Open(rf.Log, rf.Format, rf.Fields)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	r, err := newReplayer(p, rf.MaxKeys)
	if err != nil {
		return nil, err
	}
	defer r.close()
	r.rep.file = rf.Log
	if rf.Log == "-" {
		r.rep.file = "standard input"
	}
	if err := accesslog.Read(rc, format, &r.rep.bad, r.request); err != nil {
		return nil, fmt.Errorf("reading %s: %v", rf.Log, err)
	}
	return r.rep, nil
}

// replayer decides logged requests through a policy, on memstores whose
// clock is the log's time.
type replayer struct {
	pol     *policy.Policy
	now     time.Time
	limiter *sluice.Limiter
	stores  []*memstore.Store
	dec     *decide.Decider
	measure *sluice.Limiter // the same keys under unbounded limits: their peaks
	leases  sim.Leases
	checks  []decide.Check
	res     decide.Result
	rep     *Report
}

func newReplayer(p *policy.Policy, maxKeys int) (*replayer, error) {
	r := &replayer{pol: p, rep: newReport(maxKeys)}
	for _, rule := range p.Rules { // every limit reported, in the policy's order
		for _, l := range rule.Limits {
			r.rep.addLimit(rule.Name, l.Name, l.Limit).shadow = rule.Shadow
		}
	}
	clock := func() time.Time { return r.now }
	var limiters [2]*sluice.Limiter
	for i := range limiters {
		s, err := memstore.New(memstore.Config{Now: clock, SweepInterval: -1, MaxKeys: maxKeys})
		if err != nil {
			r.close()
			return nil, err
		}
		r.stores = append(r.stores, s)
		limiters[i] = sluice.New(s)
	}
	r.limiter, r.measure = limiters[0], limiters[1]
	var err error
	// Relations are peeked anew for every request: the Decider would reuse
	// a peek for a while on its own clock, not the log's.
	r.dec, err = decide.New(r.limiter, decide.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Component: "sluice replay", RelateFor: -1})
	return r, err
}

func (r *replayer) close() {
	for _, s := range r.stores {
		s.Close()
	}
}

// request decides one logged request as sluice serve would have.
func (r *replayer) request(rec *accesslog.Record) {
	t := rec.Time
	if t.Before(r.now) { // logs written at completion are a little out of order
		r.rep.outOfOrder++
		t = r.now
	}
	r.now = t
	r.leases.ReleaseUntil(r.limiter, t) // a memstore does not fail
	r.rep.arrive(t)
	req, err := rec.Request()
	if err == nil {
		r.checks, err = r.pol.Plan(req, r.checks[:0])
	}
	if err != nil {
		r.rep.invalid(err)
		return
	}
	r.dec.Run(context.Background(), r.checks, &r.res)
	r.rep.outcomes[r.res.Outcome]++
	r.observe(t, rec.Failed(), r.res.Enforced, r.res.Each, r.res.Decided, r.res.Outcome)
	r.observe(t, rec.Failed(), r.res.Shadow, r.res.ShadowEach, -1, 0)
	if !r.res.Proceed() || rec.Duration <= 0 {
		r.res.Release()
		return
	}
	holdChecks(&r.leases, r.res.Enforced, r.res.Each, t.Add(r.res.Decision.Delay+rec.Duration))
	holdChecks(&r.leases, r.res.Shadow, r.res.ShadowEach, t.Add(r.res.Decision.Delay+rec.Duration))
}

// observe counts checks and their decisions under each limit: failed
// says the logged response was a failure, decided is the index of the
// enforced check that refused (-1: none, or shadow checks, each refused
// on its own).
func (r *replayer) observe(t time.Time, failed bool, checks []decide.Check, ds []sluice.Decision, decided int, outcome decide.Outcome) {
	for i := range checks {
		c := &checks[i]
		if c.Key == "" || i >= len(ds) {
			continue
		}
		refused := false
		if decided < 0 {
			if ds[i] == (sluice.Decision{}) {
				continue // a shadow check of a request not admitted does not run
			}
			refused = !ds[i].Allowed
		} else {
			refused = outcome == decide.Refused && i == decided
		}
		r.rep.limit(c).observe(t, c.Key, keyEvent{refused: refused, delayed: ds[i].Delay > 0, failed: failed}, r.peak(c))
	}
}

// peak is how much c's key has used of an unbounded limit of the same
// window, counting this request: the most it could be refused under.
func (r *replayer) peak(c *decide.Check) int64 {
	m, ok := measureLimit(c.Limit)
	if !ok {
		return 0
	}
	d, err := r.measure.AllowN(context.Background(), c.Key, m, c.Cost)
	if err != nil {
		return 0
	}
	return m.Count - d.Remaining
}

// measureHuge is the count of the limits that measure peaks: more than
// any log asks of one key in one window.
const measureHuge = 1 << 32

// measureLimit is the limit whose use measures a key's peak under l: a
// fixed window for a fixed window, a sliding window counter of l's period
// for the rest (the period of a bucket's rate); none for concurrency.
func measureLimit(l sluice.Limit) (sluice.Limit, bool) {
	switch {
	case algo.Leases(l.Algorithm) || l.Period <= 0:
		return sluice.Limit{}, false
	case algo.Aligned(l.Algorithm):
		return sluice.FixedWindow(measureHuge, l.Period), true
	}
	return sluice.SlidingWindow(measureHuge, l.Period), true
}

// holdChecks holds the concurrency leases of checks admitted with ds
// until until.
func holdChecks(q *sim.Leases, checks []decide.Check, ds []sluice.Decision, until time.Time) {
	reqs := make([]sluice.Request, len(checks))
	for i, c := range checks {
		reqs[i] = sluice.Request{Key: c.Key, Limit: c.Limit}
	}
	q.Hold(reqs, ds[:len(reqs)], until)
}
