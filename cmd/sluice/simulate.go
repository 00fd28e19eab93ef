package main

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
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

func simulate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice simulate", flag.ContinueOnError)
	traffic := fs.String("traffic", defaultTraffic, "the requests that arrive: phases separated by commas, each N (N at once), RATE for DURATION (evenly spaced) or pause DURATION")
	rate := fs.String("rate", "10/s", "the rate every algorithm of the default set allows (100/s, 10/m, 3/250ms)")
	burst := fs.Int64("burst", 0, "the burst of the buckets, the queue of leaky_bucket (default: the rate's count)")
	warmup := fs.String("warmup", "2s", "warm_up's warm-up period")
	slot := fs.String("slot", "50ms", "the time each column stands for")
	csv := fs.Bool("csv", false, "print a table of admissions per slot (CSV) instead of the drawing")
	policyFile := fs.String("policy", "", "draw the limits of this policy file: each limit of each rule, and each rule as a whole (all its limits at once, as the gateway checks them)")
	var specs []string
	fs.Func("limit", "a limit to draw, written as in a policy file, e.g. '{algorithm: gcra, rate: 100/s, burst: 20}'; repeat to compare several (replaces the default set)", func(s string) error {
		specs = append(specs, s)
		return nil
	})
	fs.Usage = func() {
		fmt.Fprint(stdout, `Usage: sluice simulate [flags]

Draws how each algorithm treats a traffic pattern, on a simulated clock: it
finishes at once and prints the same picture every time. Each row is a
limit, each column a slot of time: how many of that slot's requests were
admitted (0 as '.', 1-9, '+' for ten or more). By default every rate
algorithm at the same rate; --limit and --policy draw your own (a policy's
limits as if one client, on one key per limit, sent all the traffic).

  sluice simulate
  sluice simulate --traffic '100, 20/s for 5s' --rate 10/s --burst 50
  sluice simulate --limit '{algorithm: sliding_window, limit: 100, window: 1m}' \
                  --limit '{algorithm: gcra, rate: 100/m, burst: 20}' \
                  --traffic '300/m for 3m' --slot 5s
  sluice simulate --policy policy.yaml --traffic '50, 5/s for 10s' --slot 250ms

Flags:
`)
		printFlags(stdout, fs, nil)
	}
	if code, done := parseFlags(fs, args, false, stdout, stderr); done {
		return code
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "sluice simulate: "+format+"\n", a...)
		return exitUsage
	}
	width, err := policy.ParseDuration(*slot)
	if err != nil || width <= 0 || width%time.Microsecond != 0 {
		return fail("--slot %q: want a positive duration in whole microseconds, such as 50ms or 1s", *slot)
	}
	arrivals, span, err := parseTraffic(*traffic)
	if err != nil {
		return fail("--traffic: %v", err)
	}
	columns := max(int((span+width-1)/width), int(arrivals[len(arrivals)-1]/width)+1)
	if columns > maxSimColumns {
		return fail("--traffic lasts %s: %d columns of --slot %s, more than %d; give a wider --slot", sluice.FormatDuration(span), columns, *slot, maxSimColumns)
	}
	var subjects []simSubject
	if *policyFile != "" {
		p, err := policy.Load(*policyFile, policy.Options{})
		if err != nil {
			return fail("--policy: %v", each(err, policy.Errors(err)))
		}
		for _, rule := range p.Rules {
			var all []sluice.Limit
			for _, l := range rule.Limits {
				if l.Limit.Algorithm == sluice.AlgorithmConcurrency {
					continue // limits requests in flight, not arrivals
				}
				all = append(all, l.Limit)
				subjects = append(subjects, simSubject{rule.Name + "/" + l.Name + ": " + l.Limit.String(), []sluice.Limit{l.Limit}})
			}
			if len(all) > 1 {
				subjects = append(subjects, simSubject{rule.Name + ": all " + strconv.Itoa(len(all)) + " limits at once", all})
			}
		}
		if len(subjects) == 0 {
			return fail("--policy %s: no limit to draw (concurrency limits requests in flight, not a rate of arrivals)", *policyFile)
		}
	}
	for i, spec := range specs {
		lim, err := policy.ParseLimit(fmt.Sprintf("--limit %d", i+1), []byte(spec))
		if err != nil {
			return fail("%v", each(err, policy.Errors(err)))
		}
		if lim.Algorithm == sluice.AlgorithmConcurrency {
			return fail("--limit %d: concurrency limits requests in flight, not a rate of arrivals; it cannot be drawn here", i+1)
		}
		subjects = append(subjects, simSubject{lim.String(), []sluice.Limit{lim}})
	}
	if len(subjects) == 0 {
		r, err := policy.ParseRate(*rate)
		if err != nil {
			return fail("--rate: %v", err)
		}
		b := *burst
		if b == 0 {
			b = r.Count
		}
		w, err := policy.ParseDuration(*warmup)
		if err != nil {
			return fail("--warmup: %v", err)
		}
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
				return fail("%s (check --rate, --burst and --warmup)", limitDetail(err))
			}
			subjects = append(subjects, simSubject{lim.String(), []sluice.Limit{lim}})
		}
	}

	runs := make([]simRun, len(subjects))
	for i, sub := range subjects {
		if runs[i], err = runSim(sub, arrivals, width, columns); err != nil {
			return fail("%s: %v", sub.label, err)
		}
	}
	if *csv {
		writeSimCSV(stdout, arrivals, runs, width, columns)
	} else {
		writeSimDrawing(stdout, *traffic, arrivals, span, runs, width, columns)
	}
	return exitOK
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
// checked together (all or nothing), each on its own key.
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
	// period of its limits.
	most   int
	period time.Duration
}

// runSim feeds the arrivals to sub's limits on a memstore whose clock is
// the arrival time.
func runSim(sub simSubject, arrivals []time.Duration, width time.Duration, columns int) (simRun, error) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // a whole day: fixed windows align with 0
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
		r.period = max(r.period, lim.Period)
	}
	var admittedAt []time.Duration
	for _, at := range arrivals {
		now = start.Add(at)
		d, err := limiter.Check(context.Background(), reqs...)
		if err != nil {
			return simRun{}, err
		}
		if !d.Allowed {
			continue
		}
		r.admitted[at/width]++
		r.total++
		admittedAt = append(admittedAt, at)
		if d.Delay > 0 {
			r.delayed++
			r.maxDelay = max(r.maxDelay, d.Delay)
		}
	}
	for i, j := 0, 0; r.period > 0 && j < len(admittedAt); j++ { // two pointers: (t-period, t]
		for admittedAt[j]-admittedAt[i] >= r.period {
			i++
		}
		r.most = max(r.most, j-i+1)
	}
	return r, nil
}

func writeSimDrawing(w io.Writer, traffic string, arrivals []time.Duration, span time.Duration, runs []simRun, width time.Duration, columns int) {
	perColumn := make([]int, columns)
	for _, at := range arrivals {
		perColumn[at/width]++
	}
	label := 0
	for _, r := range runs {
		label = max(label, len(r.label))
	}
	label = max(label, len("arrivals"))
	fmt.Fprintf(w, "traffic: %s (%d requests over %s); each column %s\n\n", traffic, len(arrivals), sluice.FormatDuration(span), sluice.FormatDuration(width))
	fmt.Fprintf(w, "%-*s  %s  %d\n", label, "arrivals", simRow(perColumn), len(arrivals))
	for _, r := range runs {
		fmt.Fprintf(w, "%-*s  %s  %d admitted", label, r.label, simRow(r.admitted), r.total)
		fmt.Fprintf(w, ", at most %d in any %s", r.most, sluice.FormatDuration(r.period))
		if r.delayed > 0 {
			fmt.Fprintf(w, ", %d after a delay (up to %s)", r.delayed, sluice.FormatDuration(r.maxDelay.Round(time.Millisecond)))
		}
		fmt.Fprintln(w)
	}
}

func writeSimCSV(w io.Writer, arrivals []time.Duration, runs []simRun, width time.Duration, columns int) {
	perColumn := make([]int, columns)
	for _, at := range arrivals {
		perColumn[at/width]++
	}
	cw := csv.NewWriter(w)
	row := []string{"slot_start_ms", "arrivals"}
	for _, r := range runs {
		row = append(row, r.label)
	}
	cw.Write(row)
	for c := range columns {
		row = append(row[:0], strconv.FormatFloat(float64(time.Duration(c)*width)/float64(time.Millisecond), 'f', -1, 64), strconv.Itoa(perColumn[c]))
		for _, r := range runs {
			row = append(row, strconv.Itoa(r.admitted[c]))
		}
		cw.Write(row)
	}
	cw.Flush()
}

// simRow draws counts: '.' for none, 1-9, '+' for ten or more.
func simRow(counts []int) string {
	var b strings.Builder
	for _, n := range counts {
		switch {
		case n == 0:
			b.WriteByte('.')
		case n >= 10:
			b.WriteByte('+')
		default:
			b.WriteByte(byte('0' + n))
		}
	}
	return b.String()
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
