package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/policy"
)

// Bounds on what one simulation may ask for, so that a typo (40000/s for
// 1d) gets an error rather than minutes of work and gigabytes.
const (
	maxSimRequests = 1_000_000
	maxSimColumns  = 2_000
)

const defaultTraffic = "30, 40/s for 2s, pause 500ms, 40/s for 1s"

// simFlags are sluice simulate's settings.
type simFlags struct {
	traffic, rate, warmup, slot, hold, policy, svg string
	burst                                          int64
	width                                          int
	csv                                            bool
	limits                                         []string
	maxDelay                                       time.Duration
	notes                                          []string // limits left out, and why
}

func simulate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice simulate", flag.ContinueOnError)
	var f simFlags
	fs.StringVar(&f.traffic, "traffic", defaultTraffic, "the requests that arrive: phases separated by commas, each N (N at once), RATE for DURATION (evenly spaced) or pause DURATION")
	fs.StringVar(&f.rate, "rate", "10/s", "the rate every algorithm of the default set allows (100/s, 10/m, 3/250ms)")
	fs.Int64Var(&f.burst, "burst", 0, "the burst of the buckets, the queue of leaky_bucket (default: the rate's count)")
	fs.StringVar(&f.warmup, "warmup", "2s", "warm_up's warm-up period")
	fs.StringVar(&f.slot, "slot", "", "the time each column stands for (default: the shortest of 1ms, 2ms, 5ms, 10ms, ... 1h, 1d whose columns fit --width)")
	fs.IntVar(&f.width, "width", terminalWidth(), "columns of the drawing (default: $COLUMNS, else 80)")
	fs.StringVar(&f.hold, "hold", "500ms", "how long each admitted request stays in flight, for concurrency limits")
	fs.BoolVar(&f.csv, "csv", false, "print a table of admissions per slot (CSV) instead of the drawing")
	fs.StringVar(&f.svg, "svg", "", "also write the drawing as an SVG chart to this file")
	fs.DurationVar(&f.maxDelay, "max-delay", time.Second, "the longest shaping delay the server waits (sluice serve's max_delay): a leaky_bucket whose queue cannot be served within it is refused by sluice check, so it is not drawn")
	fs.StringVar(&f.policy, "policy", "", "draw the limits of this policy file: each limit of each rule, each override, and each rule as a whole (all its limits at once, as the gateway checks them)")
	fs.Func("limit", "a limit to draw, written as in a policy file, e.g. '{algorithm: gcra, rate: 100/s, burst: 20}'; repeat to compare several (replaces the default set)", func(s string) error {
		f.limits = append(f.limits, s)
		return nil
	})
	fs.Usage = func() { simulateUsage(fs) }
	if code, done := parseFlags(fs, args, false, stdout, stderr); done {
		return code
	}
	sim, err := f.build()
	for _, n := range f.notes {
		fmt.Fprintf(stderr, "sluice simulate: %s\n", n)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice simulate: %v\n", err)
		return exitUsage
	}
	if f.svg != "" {
		if err := writeFileWith(f.svg, func(w io.Writer) { writeSimSVG(w, sim) }); err != nil {
			fmt.Fprintf(stderr, "sluice simulate: --svg: %v\n", err)
			return exitInvalid
		}
	}
	if f.csv {
		writeSimCSV(stdout, sim)
	} else {
		writeSimDrawing(stdout, sim)
	}
	return exitOK
}

func simulateUsage(fs *flag.FlagSet) {
	fmt.Fprint(fs.Output(), `Usage: sluice simulate [flags]

Draws how each algorithm treats a traffic pattern, on a simulated clock: it
finishes at once and prints the same picture every time. Each limit is a
row, each column a slot of time, each glyph how many of that slot's requests
were admitted: '.' none, 1-9 that many, '+' ten or more (--csv prints the
exact counts). By default every rate algorithm at the same rate; --limit and
--policy draw your own (a policy's limits as if one client, on one key per
limit, sent all the traffic; each admitted request holds a concurrency
limit's lease for --hold). A leaky_bucket whose queue the server could not
serve within --max-delay (its max_delay) is not drawn, as sluice check
refuses it.

  sluice simulate
  sluice simulate --traffic '100, 20/s for 5s' --rate 10/s --burst 50
  sluice simulate --limit '{algorithm: sliding_window, limit: 100, window: 1m}' \
                  --limit '{algorithm: gcra, rate: 100/m, burst: 20}' \
                  --traffic '300/m for 3m'
  sluice simulate --policy policy.yaml --traffic '50, 5/s for 10s' --svg sim.svg

Flags:
`)
	printFlags(fs.Output(), fs, nil)
}

// terminalWidth is $COLUMNS, or 80.
func terminalWidth() int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return 80
}

// sim is a simulation ready to draw: the arrivals, the slots, and what
// each subject admitted.
type sim struct {
	traffic  string
	arrivals []time.Duration
	span     time.Duration
	slot     time.Duration
	columns  int
	width    int
	runs     []simRun
}

// build checks the flags and runs the simulation.
func (f *simFlags) build() (*sim, error) {
	arrivals, span, err := parseTraffic(f.traffic)
	if err != nil {
		return nil, fmt.Errorf("--traffic: %v", err)
	}
	if f.width < 20 || f.width > maxSimColumns {
		return nil, fmt.Errorf("--width %d: want 20 to %d columns", f.width, maxSimColumns)
	}
	s := &sim{traffic: f.traffic, arrivals: arrivals, span: span, width: f.width}
	if err := s.setSlot(f.slot, !f.csv && f.svg == ""); err != nil {
		return nil, err
	}
	hold, err := policy.ParseDuration(f.hold)
	if err != nil || hold <= 0 {
		return nil, fmt.Errorf("--hold %q: want a positive duration, such as 500ms", f.hold)
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
func (s *sim) setSlot(slot string, fit bool) error {
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
	if s.columns > maxSimColumns {
		return fmt.Errorf("--traffic lasts %s: %d columns of --slot %s, more than %d; give a wider --slot", sluice.FormatDuration(s.span), s.columns, sluice.FormatDuration(s.slot), maxSimColumns)
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
func (f *simFlags) subjects() ([]simSubject, error) {
	var subjects []simSubject
	if f.policy != "" {
		p, err := policy.Load(f.policy, policy.Options{MaxDelay: f.maxDelay})
		if err != nil {
			return nil, fmt.Errorf("--policy: %v", each(err, policy.Errors(err)))
		}
		subjects = policySubjects(p)
		if len(subjects) == 0 {
			return nil, fmt.Errorf("--policy %s: no limit to draw", f.policy)
		}
	}
	for i, spec := range f.limits {
		lim, err := policy.ParseLimit(fmt.Sprintf("--limit %d", i+1), []byte(spec))
		if err != nil {
			return nil, each(err, policy.Errors(err))
		}
		if err := unservable(lim, f.maxDelay); err != nil {
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
func (f *simFlags) defaultSubjects() ([]simSubject, error) {
	r, err := policy.ParseRate(f.rate)
	if err != nil {
		return nil, fmt.Errorf("--rate: %v", err)
	}
	b := f.burst
	if b == 0 {
		b = r.Count
	}
	w, err := policy.ParseDuration(f.warmup)
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
		if err := unservable(lim, f.maxDelay); err != nil {
			f.notes = append(f.notes, "not drawn: "+err.Error())
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

// writeFileWith writes what write writes to path.
func writeFileWith(path string, write func(io.Writer)) error {
	var b bytes.Buffer
	write(&b)
	return os.WriteFile(path, b.Bytes(), 0o644)
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
			if !ok || n > maxSimRequests-int64(len(arrivals)) {
				return nil, 0, bad("more than %d requests in all", maxSimRequests)
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
			if n > maxSimRequests-int64(len(arrivals)) {
				return nil, 0, bad("%d requests; at most %d in all", n, maxSimRequests)
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
	var leases leaseQueue
	var admittedAt []time.Duration
	for _, at := range arrivals {
		now = simStart.Add(at)
		if err := leases.releaseUntil(limiter, now); err != nil {
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
			leases.hold(reqs, each, now.Add(d.Delay+hold))
			r.inFlight = max(r.inFlight, leases.len())
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
