// Package simulate runs limits over synthetic traffic on a simulated
// clock and draws what each admitted: sluice simulate. Each row is one
// limit, or the limits of a rule checked together, on a memstore whose
// clock is the arrival time, so a simulation finishes at once and draws
// the same picture every time. Leases holds concurrency leases on such a
// clock until their requests end (sluice replay's too).
package simulate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/yamlload"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/policy"
)

// Bounds on what one simulation may ask for, so that a typo (40000/s for
// 1d) gets an error rather than minutes of work and gigabytes.
const (
	MaxRequests = 1_000_000
	MaxColumns  = 2_000
)

// DefaultTraffic is what sluice simulate draws when no --traffic is given.
const DefaultTraffic = "30, 40/s for 2s, pause 500ms, 40/s for 1s"

// Options are what to simulate and how to draw it: sluice simulate's
// flags, each field its flag's value (--traffic, --rate, ...).
type Options struct {
	Traffic, Rate, Warmup, Slot, Hold, Policy, SVG string
	Burst                                          int64
	Width                                          int
	CSV                                            bool
	Limits                                         []string // --limit, each a limit written as in a policy
	MaxDelay                                       time.Duration
	Notes                                          []string // set by Build: limits left out, and why
}

// Sim is a simulation ready to draw: the arrivals, the slots, and what
// each subject admitted.
type Sim struct {
	traffic  string
	arrivals []time.Duration
	span     time.Duration
	slot     time.Duration
	columns  int
	width    int
	runs     []simRun
}

// Build checks the options and runs the simulation.
func (f *Options) Build() (*Sim, error) {
	arrivals, span, err := parseTraffic(f.Traffic)
	if err != nil {
		return nil, fmt.Errorf("--traffic: %v", err)
	}
	if f.Width < 20 || f.Width > MaxColumns {
		return nil, fmt.Errorf("--width %d: want 20 to %d columns", f.Width, MaxColumns)
	}
	s := &Sim{traffic: f.Traffic, arrivals: arrivals, span: span, width: f.Width}
	if err := s.setSlot(f.Slot, !f.CSV && f.SVG == ""); err != nil {
		return nil, err
	}
	hold, err := policy.ParseDuration(f.Hold)
	if err != nil || hold <= 0 {
		return nil, fmt.Errorf("--hold %q: want a positive duration, such as 500ms", f.Hold)
	}
	subjects, err := f.subjects()
	if err != nil {
		return nil, err
	}
	s.runs = make([]simRun, len(subjects))
	for i, sub := range subjects {
		if s.runs[i], err = runSim(sub, arrivals, s.slot, s.columns, hold); err != nil {
			return nil, fmt.Errorf("%s: %v", sub.label, err)
		}
	}
	return s, nil
}

// setSlot sets the slot and the columns: the --slot given, or the
// shortest nice one whose columns fit the width. fit refuses a --slot
// whose columns would not fit (a drawing on the terminal).
func (s *Sim) setSlot(slot string, fit bool) error {
	last := s.arrivals[len(s.arrivals)-1]
	columnsOf := func(w time.Duration) int { return max(int((s.span+w-1)/w), int(last/w)+1) }
	room := s.width - 2 // rows are indented by two
	if slot == "" {
		for _, w := range niceSlots {
			if s.slot = w; columnsOf(w) <= room {
				break
			}
		}
	} else {
		w, err := policy.ParseDuration(slot)
		if err != nil || w <= 0 || w%time.Microsecond != 0 {
			return fmt.Errorf("--slot %q: want a positive duration in whole microseconds, such as 50ms or 1s", slot)
		}
		s.slot = w
	}
	s.columns = columnsOf(s.slot)
	if s.columns > MaxColumns {
		return fmt.Errorf("--traffic lasts %s: %d columns of --slot %s, more than %d; give a wider --slot", sluice.FormatDuration(s.span), s.columns, sluice.FormatDuration(s.slot), MaxColumns)
	}
	if fit && s.columns > room {
		return fmt.Errorf("--slot %s: %d columns, wider than --width %d allows (%d); give a wider --slot, a larger --width, or leave --slot out", sluice.FormatDuration(s.slot), s.columns, s.width, room)
	}
	return nil
}

// niceSlots are the slots sluice simulate picks from, shortest first.
var niceSlots = func() []time.Duration {
	var out []time.Duration
	for _, unit := range []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond} {
		out = append(out, unit, 2*unit, 5*unit)
	}
	return append(out, time.Second, 2*time.Second, 5*time.Second, 10*time.Second, 15*time.Second, 30*time.Second,
		time.Minute, 2*time.Minute, 5*time.Minute, 10*time.Minute, 15*time.Minute, 30*time.Minute,
		time.Hour, 2*time.Hour, 3*time.Hour, 6*time.Hour, 12*time.Hour, 24*time.Hour, 7*24*time.Hour, 30*24*time.Hour, 365*24*time.Hour)
}()

// subjects are the rows to draw: the policy's, the --limit ones, or the
// default set.
func (f *Options) subjects() ([]simSubject, error) {
	var subjects []simSubject
	if f.Policy != "" {
		p, err := policy.Load(f.Policy, policy.Options{MaxDelay: f.MaxDelay})
		if err != nil {
			return nil, fmt.Errorf("--policy: %v", yamlload.Join(err, policy.Errors(err)))
		}
		subjects = policySubjects(p)
		if len(subjects) == 0 {
			return nil, fmt.Errorf("--policy %s: no limit to draw", f.Policy)
		}
	}
	for i, spec := range f.Limits {
		lim, err := policy.ParseLimit(fmt.Sprintf("--limit %d", i+1), []byte(spec))
		if err != nil {
			return nil, yamlload.Join(err, policy.Errors(err))
		}
		if err := unservable(lim, f.MaxDelay); err != nil {
			return nil, fmt.Errorf("--limit %d: %v", i+1, err)
		}
		subjects = append(subjects, simSubject{lim.String(), []sluice.Limit{lim}})
	}
	if len(subjects) > 0 {
		return subjects, nil
	}
	return f.defaultSubjects()
}

// policySubjects are a policy's rows: each limit, each of its overrides,
// and each rule of several limits as a whole.
func policySubjects(p *policy.Policy) []simSubject {
	var subjects []simSubject
	for _, rule := range p.Rules {
		var all []sluice.Limit
		for _, l := range rule.Limits {
			all = append(all, l.Limit)
			name := rule.Name + "/" + l.Name
			subjects = append(subjects, simSubject{name + ": " + l.Limit.String(), []sluice.Limit{l.Limit}})
			for _, o := range l.Overrides() {
				if o.Unlimited {
					subjects = append(subjects, simSubject{name + " for " + o.When + ": no limit", nil})
				} else {
					subjects = append(subjects, simSubject{name + " for " + o.When + ": " + o.Limit.String(), []sluice.Limit{o.Limit}})
				}
			}
		}
		if len(all) > 1 {
			subjects = append(subjects, simSubject{rule.Name + ": all " + strconv.Itoa(len(all)) + " limits at once", all})
		}
	}
	return subjects
}

// defaultSubjects are every rate algorithm at --rate.
func (f *Options) defaultSubjects() ([]simSubject, error) {
	r, err := policy.ParseRate(f.Rate)
	if err != nil {
		return nil, fmt.Errorf("--rate: %v", err)
	}
	b := f.Burst
	if b == 0 {
		b = r.Count
	}
	w, err := policy.ParseDuration(f.Warmup)
	if err != nil {
		return nil, fmt.Errorf("--warmup: %v", err)
	}
	var subjects []simSubject
	for _, lim := range []sluice.Limit{
		sluice.FixedWindow(r.Count, r.Period),
		sluice.SlidingLog(r.Count, r.Period),
		sluice.SlidingWindow(r.Count, r.Period),
		sluice.TokenBucket(r, b),
		sluice.GCRA(r, b),
		sluice.LeakyBucket(r, b),
		sluice.WarmUp(r, w),
	} {
		if err := lim.Validate(); err != nil {
			return nil, fmt.Errorf("%s (check --rate, --burst and --warmup)", limitDetail(err))
		}
		if err := unservable(lim, f.MaxDelay); err != nil {
			f.Notes = append(f.Notes, "not drawn: "+err.Error())
			continue
		}
		subjects = append(subjects, simSubject{lim.String(), []sluice.Limit{lim}})
	}
	return subjects, nil
}

// unservable says why a leaky_bucket's queue cannot be served within
// maxDelay, as sluice check refuses it in a policy (nil when it can, or
// for another algorithm).
func unservable(lim sluice.Limit, maxDelay time.Duration) error {
	if !algo.Shapes(lim.Algorithm) || maxDelay <= 0 {
		return nil
	}
	p, err := algo.Compile(lim)
	if err != nil || p.LongestDelay() <= algo.MaxDelay(maxDelay) {
		return nil
	}
	return fmt.Errorf("%s: the last queued request would wait %s, longer than the server's max_delay of %s, so sluice check refuses it; lower --burst, or give --max-delay as the server's",
		lim, sluice.FormatDuration(time.Duration(p.LongestDelay())*time.Microsecond), sluice.FormatDuration(maxDelay))
}

// parseTraffic turns a traffic description into arrival times, from 0, in
// order, and the time its phases last (a burst takes none).
func parseTraffic(s string) (arrivals []time.Duration, span time.Duration, err error) {
	if strings.TrimSpace(s) == "" {
		return nil, 0, errors.New(`empty (write phases such as "30, 40/s for 2s, pause 500ms")`)
	}
	var t time.Duration
	for i, phase := range strings.Split(s, ",") {
		phase = strings.TrimSpace(phase)
		bad := func(why string, a ...any) error {
			return fmt.Errorf("phase %d %q: %s", i+1, phase, fmt.Sprintf(why, a...))
		}
		switch f := strings.Fields(phase); {
		case len(f) == 2 && f[0] == "pause":
			d, err := policy.ParseDuration(f[1])
			if err != nil || d <= 0 {
				return nil, 0, bad("want a positive duration after pause, such as pause 500ms")
			}
			if t += d; t < 0 || t > 100*365*24*time.Hour {
				return nil, 0, bad("the traffic lasts too long")
			}
		case len(f) == 3 && f[1] == "for":
			r, err := policy.ParseRate(f[0])
			if err != nil {
				return nil, 0, bad("%v", err)
			}
			d, err := policy.ParseDuration(f[2])
			if err != nil || d <= 0 {
				return nil, 0, bad("want a positive duration after for, such as 40/s for 2s")
			}
			// ⌊Count·d/Period⌋ requests, the k-th at k·Period/Count.
			n, ok := mulDiv(r.Count, int64(d), int64(r.Period))
			if !ok || n > MaxRequests-int64(len(arrivals)) {
				return nil, 0, bad("more than %d requests in all", MaxRequests)
			}
			for k := range n {
				off, _ := mulDiv(k, int64(r.Period), r.Count) // < d, so no overflow
				arrivals = append(arrivals, t+time.Duration(off))
			}
			if t += d; t < 0 || t > 100*365*24*time.Hour {
				return nil, 0, bad("the traffic lasts too long")
			}
		case len(f) == 1 || len(f) == 3 && f[1] == "at" && f[2] == "once":
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil || n <= 0 {
				return nil, 0, bad("want N (N requests at once), RATE for DURATION, or pause DURATION")
			}
			if n > MaxRequests-int64(len(arrivals)) {
				return nil, 0, bad("%d requests; at most %d in all", n, MaxRequests)
			}
			for range n {
				arrivals = append(arrivals, t)
			}
		default:
			return nil, 0, bad("want N (N requests at once), RATE for DURATION, or pause DURATION")
		}
	}
	if len(arrivals) == 0 {
		return nil, 0, errors.New("no requests arrive")
	}
	return arrivals, t, nil
}

// mulDiv returns ⌊a·b/c⌋ for non-negative a, b and positive c, and false
// if it does not fit an int64.
func mulDiv(a, b, c int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 0, false
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return 0, false
	}
	return int64(q), true
}

// simSubject is what one row draws: one limit, or the limits of a rule
// checked together (all or nothing), each on its own key; none admits
// everything (an unlimited override).
type simSubject struct {
	label  string
	limits []sluice.Limit
}

// simRun is what one subject did with the arrivals.
type simRun struct {
	simSubject
	admitted []int // per column
	total    int
	delayed  int
	maxDelay time.Duration
	// most is the most admitted within any span of period, the longest
	// period of its limits; inFlight the most in flight at once under its
	// concurrency limits (0 without).
	most     int
	period   time.Duration
	inFlight int
}

// simStart is the simulated clock's origin: a whole day, so that fixed
// windows align with 0.
var simStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// runSim feeds the arrivals to sub's limits on a memstore whose clock is
// the arrival time; an admitted request gives its concurrency leases back
// hold later.
func runSim(sub simSubject, arrivals []time.Duration, width time.Duration, columns int, hold time.Duration) (simRun, error) {
	var now time.Time
	store, err := memstore.New(memstore.Config{Now: func() time.Time { return now }, SweepInterval: -1})
	if err != nil {
		return simRun{}, err
	}
	defer store.Close()
	limiter := sluice.New(store)
	r := simRun{simSubject: sub, admitted: make([]int, columns)}
	reqs := make([]sluice.Request, len(sub.limits))
	for i, lim := range sub.limits {
		reqs[i] = sluice.Request{Key: "sim" + strconv.Itoa(i), Limit: lim, Cost: 1}
		if !algo.Leases(lim.Algorithm) {
			r.period = max(r.period, lim.Period)
		}
	}
	each := make([]sluice.Decision, len(reqs))
	var leases Leases
	var admittedAt []time.Duration
	for _, at := range arrivals {
		now = simStart.Add(at)
		if err := leases.ReleaseUntil(limiter, now); err != nil {
			return simRun{}, err
		}
		if len(reqs) > 0 {
			d, _, err := limiter.CheckEach(context.Background(), reqs, each)
			if err != nil {
				return simRun{}, err
			}
			if !d.Allowed {
				continue
			}
			if d.Delay > 0 {
				r.delayed++
				r.maxDelay = max(r.maxDelay, d.Delay)
			}
			leases.Hold(reqs, each, now.Add(d.Delay+hold))
			r.inFlight = max(r.inFlight, leases.Len())
		}
		r.admitted[at/width]++
		r.total++
		admittedAt = append(admittedAt, at)
	}
	r.most = mostWithin(admittedAt, r.period)
	return r, nil
}

// mostWithin is the most times within any span (t-period, t].
func mostWithin(times []time.Duration, period time.Duration) int {
	most := 0
	for i, j := 0, 0; period > 0 && j < len(times); j++ { // two pointers
		for times[j]-times[i] >= period {
			i++
		}
		most = max(most, j-i+1)
	}
	return most
}

// limitDetail is a *sluice.LimitError's message without the sentinel's
// prefix ("token_bucket: burst must be at least 1 (got 0)").
func limitDetail(err error) string {
	var le *sluice.LimitError
	if errors.As(err, &le) {
		return le.Detail()
	}
	return err.Error()
}
