package simulate

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestParseTraffic: each kind of phase, worked out by hand: a burst at
// once, a rate evenly spaced (⌊count·d/period⌋ requests, the k-th at
// k·period/count), a pause; the span is what the phases last.
func TestParseTraffic(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		traffic  string
		arrivals []time.Duration
		span     time.Duration
	}{
		{"3", []time.Duration{0, 0, 0}, 0},
		{"2 at once, pause 1s, 1", []time.Duration{0, 0, time.Second}, time.Second},
		{"4/s for 1s", []time.Duration{0, 250 * ms, 500 * ms, 750 * ms}, time.Second},
		{"pause 100ms, 3/250ms for 500ms, 1", []time.Duration{100 * ms, 183333333, 266666666, 350 * ms, 433333333, 516666666, 600 * ms}, 600 * ms},
		{"1/s for 1500ms", []time.Duration{0}, 1500 * ms},
	} {
		arrivals, span, err := parseTraffic(c.traffic)
		if err != nil || span != c.span || len(arrivals) != len(c.arrivals) {
			t.Errorf("%q: %v over %v (%v); want %v over %v", c.traffic, arrivals, span, err, c.arrivals, c.span)
			continue
		}
		for i := range arrivals {
			if arrivals[i] != c.arrivals[i] {
				t.Errorf("%q: arrival %d at %v, want %v", c.traffic, i, arrivals[i], c.arrivals[i])
			}
		}
	}
	for traffic, want := range map[string]string{
		"":                "empty",
		"pause 1s":        "no requests arrive",
		"30, 40/s for":    `phase 2 "40/s for": want N`,
		"100000/s for 1h": "more than 1000000 requests in all",
		"pause 900000h":   "the traffic lasts too long",
	} {
		if _, _, err := parseTraffic(traffic); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", traffic, err, want)
		}
	}
}

// TestRunHandWorked: ten requests at 0.5 s and ten at 1.0 s against 10
// per second, in columns of 250 ms: fixed_window admits all 20 (two
// windows), sliding_log none at 1.0 s, a token bucket its burst of 10
// then the 5 refilled in half a second.
func TestRunHandWorked(t *testing.T) {
	arrivals, _, err := parseTraffic("pause 500ms, 10, pause 500ms, 10")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		lim        sluice.Limit
		admitted   []int
		total, max int
	}{
		{sluice.FixedWindow(10, time.Second), []int{0, 0, 10, 0, 10}, 20, 20},
		{sluice.SlidingLog(10, time.Second), []int{0, 0, 10, 0, 0}, 10, 10},
		{sluice.TokenBucket(sluice.PerSecond(10), 10), []int{0, 0, 10, 0, 5}, 15, 15},
	} {
		r, err := runSim(simSubject{c.lim.String(), []sluice.Limit{c.lim}}, arrivals, 250*time.Millisecond, 5, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if r.total != c.total || r.most != c.max || r.period != time.Second || !slices.Equal(r.admitted, c.admitted) {
			t.Errorf("%s: %v, %d admitted, most %d in %v; want %v, %d, %d in 1s", c.lim, r.admitted, r.total, r.most, r.period, c.admitted, c.total, c.max)
		}
	}
}

// TestLeases: a lease is held until its request ends, then given back,
// earliest first; requests without a concurrency lease are not held.
func TestLeases(t *testing.T) {
	var now time.Time
	store, err := memstore.New(memstore.Config{Now: func() time.Time { return now }, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l := sluice.New(store)
	lim := sluice.Concurrency(2, time.Minute)
	reqs := []sluice.Request{{Key: "k", Limit: lim, Cost: 1}, {Key: "w", Limit: sluice.FixedWindow(100, time.Second), Cost: 1}}
	each := make([]sluice.Decision, 2)
	var q Leases
	take := func(until time.Duration) bool {
		d, _, err := l.CheckEach(context.Background(), reqs, each)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			q.Hold(reqs, each, now.Add(until))
		}
		return d.Allowed
	}
	now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if !take(2*time.Second) || !take(time.Second) || take(time.Second) || q.Len() != 2 {
		t.Fatalf("two in flight admitted, the third refused: %d held", q.Len())
	}
	now = now.Add(time.Second)
	if err := q.ReleaseUntil(l, now); err != nil || q.Len() != 1 || !take(time.Second) {
		t.Fatalf("after 1s: %v, %d held", err, q.Len())
	}
	q.Hold(reqs[1:], each[1:], now.Add(time.Hour)) // no concurrency lease: nothing held
	if q.Len() != 2 {
		t.Errorf("%d held, want 2", q.Len())
	}
}

// TestMostWithin: the most times within any span (t-period, t].
func TestMostWithin(t *testing.T) {
	s := time.Second
	if got := mostWithin([]time.Duration{0, 0, 500 * time.Millisecond, s, s, 2 * s}, s); got != 3 {
		t.Errorf("%d, want 3 (0.5s, 1s, 1s)", got)
	}
	if got := mostWithin([]time.Duration{0, 1}, 0); got != 0 {
		t.Errorf("no period: %d", got)
	}
	if n, ok := mulDiv(1<<62, 4, 2); ok || n != 0 {
		t.Errorf("mulDiv overflow: %d, %v", n, ok)
	}
	if n, ok := mulDiv(1<<62, 4, 8); !ok || n != 1<<61 {
		t.Errorf("mulDiv: %d, %v", n, ok)
	}
}

// TestBuild: the default set leaves out a leaky_bucket a server refuses,
// with a note; the slot is the shortest nice one whose columns fit; the
// drawing and CSV say what each row admitted.
func TestBuild(t *testing.T) {
	o := Options{Traffic: DefaultTraffic, Rate: "10/s", Burst: 50, Warmup: "2s", Hold: "500ms", Width: 80, MaxDelay: time.Second}
	s, err := o.Build()
	if err != nil {
		t.Fatal(err)
	}
	if s.slot != 50*time.Millisecond || s.columns != 70 || len(s.runs) != 6 || len(o.Notes) != 1 || !strings.Contains(o.Notes[0], "not drawn: leaky_bucket(10/s, queue 50)") {
		t.Fatalf("slot %v, %d columns, %d rows, notes %q", s.slot, s.columns, len(s.runs), o.Notes)
	}
	var drawing, csv bytes.Buffer
	s.WriteDrawing(&drawing)
	s.WriteCSV(&csv)
	if !strings.Contains(drawing.String(), "each column 50ms: '.' none admitted") || !strings.Contains(drawing.String(), "fixed_window(10 per 1s): ") {
		t.Errorf("drawing:\n%s", drawing.String())
	}
	if lines := strings.Split(strings.TrimSpace(csv.String()), "\n"); len(lines) != 71 || !strings.HasPrefix(lines[0], "slot_start_ms,arrivals,fixed_window(10 per 1s),") {
		t.Errorf("CSV: %d lines, header %q", len(lines), lines[0])
	}
	o.Slot = "10ms"
	if _, err := o.Build(); err == nil || !strings.Contains(err.Error(), "--slot 10ms: 350 columns, wider than --width 80 allows (78)") {
		t.Errorf("a slot too narrow: %v", err)
	}
}

// FuzzParseTraffic: no traffic description panics or yields more than the
// bound; what parses is in order, from 0, within the time its phases last
// (a burst at the very end included).
func FuzzParseTraffic(f *testing.F) {
	for _, s := range []string{DefaultTraffic, "10", "10 at once", "pause 1s, 5", "3/250ms for 1s", "1/d for 3d", "9223372036854775807/ns for 1d", ",", "pause", "for for for"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		arrivals, span, err := parseTraffic(s)
		if err != nil {
			return
		}
		if len(arrivals) == 0 || len(arrivals) > MaxRequests {
			t.Fatalf("%q: %d arrivals", s, len(arrivals))
		}
		for i, at := range arrivals {
			if at < 0 || at > span || i > 0 && at < arrivals[i-1] {
				t.Fatalf("%q: arrival %d at %v (span %v, previous %v)", s, i, at, span, arrivals[max(i-1, 0)])
			}
		}
	})
}
