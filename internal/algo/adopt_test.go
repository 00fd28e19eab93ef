package algo

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// change is a state spent under one limit, read under another at a time:
// what the new limit must decide.
type change struct {
	name     string
	from, to sluice.Limit
	spend    []tick // under from, from t0
	at       time.Duration
	cost     int64
	want     sluice.Decision
}

// TestAdopt: the rule per algorithm that sluice.Limit documents, as step
// tables: spend under one limit, decide under a changed one.
func TestAdopt(t *testing.T) {
	for _, tc := range []change{
		{"window raised keeps its count", sluice.FixedWindow(3, time.Hour), sluice.FixedWindow(4, time.Hour),
			[]tick{{0, 3, yes(0, time.Hour)}}, time.Minute, 1, yes(0, 59*time.Minute)},
		{"window lowered refuses", sluice.FixedWindow(3, time.Hour), sluice.FixedWindow(2, time.Hour),
			[]tick{{0, 3, yes(0, time.Hour)}}, time.Minute, 1, no(0, 59*time.Minute, 59*time.Minute)}, // never a negative remaining
		{"a shorter window keeps the count until its own end", sluice.FixedWindow(3, time.Hour), sluice.FixedWindow(3, time.Minute),
			[]tick{{0, 3, yes(0, time.Hour)}}, 90 * s, 1, no(0, 30*s, 30*s)},
		{"an ended window is forgotten", sluice.FixedWindow(3, time.Minute), sluice.FixedWindow(3, time.Hour),
			[]tick{{0, 3, yes(0, time.Minute)}}, 2 * time.Minute, 1, yes(2, 58*time.Minute)},
		{"a window becomes a calendar day", sluice.FixedWindow(3, time.Hour), sluice.CalendarWindow(4, sluice.Day, ""),
			[]tick{{0, 3, yes(0, time.Hour)}}, time.Minute, 1, yes(0, 23*time.Hour+59*time.Minute)},
		{"bucket raised: tokens used are kept", sluice.TokenBucket(sluice.PerHour(3), 3), sluice.TokenBucket(sluice.PerHour(4), 4),
			[]tick{{0, 3, yes(0, time.Hour)}}, 0, 1, yes(0, time.Hour)},
		{"bucket lowered: capped at the new burst", sluice.TokenBucket(sluice.PerHour(3), 3), sluice.TokenBucket(sluice.PerHour(2), 2),
			[]tick{{0, 3, yes(0, time.Hour)}}, 0, 1, no(0, 30*time.Minute, time.Hour)},
		{"gcra raised", sluice.GCRA(sluice.PerHour(3), 3), sluice.GCRA(sluice.PerHour(4), 4),
			[]tick{{0, 3, yes(0, time.Hour)}}, 0, 1, yes(0, time.Hour)},
		{"leaky bucket keeps its queue", sluice.LeakyBucket(sluice.PerSecond(1), 3), sluice.LeakyBucket(sluice.PerSecond(2), 3),
			[]tick{{0, 1, sluice.Decision{Allowed: true, Remaining: 3, ResetAfter: s}}, {0, 1, sluice.Decision{Allowed: true, Remaining: 2, ResetAfter: 2 * s, Delay: s}}},
			0, 1, sluice.Decision{Allowed: true, Remaining: 1, ResetAfter: 1500 * ms, Delay: s}},
		{"warm-up: warmth kept, at most the new period", sluice.WarmUp(sluice.PerSecond(10), 10*s), sluice.WarmUp(sluice.PerSecond(10), 50*ms),
			[]tick{{0, 1, sluice.Decision{Allowed: true, Remaining: 0, ResetAfter: 298 * ms, Limit: 1}}}, 300 * ms, 1,
			sluice.Decision{Allowed: true, ResetAfter: 100 * ms, Limit: 1}}, // warmth 100ms capped at 50ms
		{"concurrency keeps its leases", sluice.Concurrency(3, time.Minute), sluice.Concurrency(2, time.Minute),
			[]tick{{0, 2, yes(1, time.Minute)}}, 0, 1, no(0, time.Minute, time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, to := compile(t, tc.from), compile(t, tc.to)
			base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro() // a day, an hour, a minute start
			var st State
			for i, sp := range tc.spend {
				got := Step(&from, &st, base+int64(sp.at/us), sp.cost, NoMaxDelay, 7, true)
				want := sp.want
				if want.Limit == 0 {
					want.Limit = from.Cap
				}
				if tc.from.Algorithm == sluice.AlgorithmConcurrency {
					want.Lease = 7
				}
				if got != want {
					t.Fatalf("spend %d: got %+v, want %+v", i, got, want)
				}
			}
			now := base + int64(tc.at/us)
			if !from.Same(&to) {
				Adopt(&from, &to, &st, now)
			}
			got := Step(&to, &st, now, tc.cost, NoMaxDelay, 0, false)
			want := tc.want
			if want.Limit == 0 {
				want.Limit = to.Cap
			}
			if got != want {
				t.Errorf("under %s:\n got %+v\nwant %+v", tc.to, got, want)
			}
		})
	}
}

// TestSame: limits written differently that compile alike need no
// carrying over; any parameter the state depends on does.
func TestSame(t *testing.T) {
	same := func(a, b sluice.Limit) bool { p, q := compile(t, a), compile(t, b); return p.Same(&q) }
	if !same(sluice.TokenBucket(sluice.Per(2, 2*s), 4), sluice.TokenBucket(sluice.PerSecond(1), 4)) {
		t.Error("2/2s and 1/s differ")
	}
	if same(sluice.TokenBucket(sluice.PerSecond(1), 4), sluice.TokenBucket(sluice.PerSecond(1), 5)) {
		t.Error("bursts 4 and 5 are the same")
	}
	if same(sluice.CalendarWindow(1, sluice.Day, "Europe/Berlin"), sluice.CalendarWindow(1, sluice.Day, "UTC")) {
		t.Error("days in two zones are the same")
	}
	if !same(sluice.CalendarWindow(1, sluice.Day, "UTC"), sluice.CalendarWindow(1, sluice.Day, "")) {
		t.Error("UTC and \"\" differ")
	}
	if !same(sluice.LeakyBucket(sluice.PerSecond(1), 3), sluice.LeakyBucket(sluice.PerSecond(1), 3)) {
		t.Error("a limit differs from itself")
	}
}
