package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

func TestLimitString(t *testing.T) {
	for _, tc := range []struct {
		lim  sluice.Limit
		want string
	}{
		{sluice.TokenBucket(sluice.PerSecond(100), 20), "token_bucket(100/s, burst 20)"},
		{sluice.GCRA(sluice.PerMinute(10), 5), "gcra(10/m, burst 5)"},
		{sluice.FixedWindow(1000, time.Hour), "fixed_window(1000 per 1h)"},
		{sluice.SlidingLog(5, 90*time.Second), "sliding_log(5 per 90s)"},
		{sluice.SlidingWindow(100, 24*time.Hour), "sliding_window(100 per 1d)"},
		{sluice.LeakyBucket(sluice.PerSecond(10), 20), "leaky_bucket(10/s, queue 20)"},
		{sluice.LeakyBucket(sluice.PerSecond(10), 20).WithNoDelay(5), "leaky_bucket(10/s, queue 20, nodelay 5)"},
		{sluice.WarmUp(sluice.Per(3, 250*time.Millisecond), 3*time.Second), "warm_up(3/250ms, warm-up 3s)"},
		{sluice.Concurrency(10, 30*time.Second), "concurrency(10, lease 30s)"},
	} {
		if got := tc.lim.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
		if err := tc.lim.Validate(); err != nil {
			t.Errorf("%s: %v", tc.want, err)
		}
		alg, err := sluice.ParseAlgorithm(tc.lim.Algorithm.String())
		if err != nil || alg != tc.lim.Algorithm {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", tc.lim.Algorithm, alg, err)
		}
	}
}

// TestValidate checks that every kind of nonsense is refused with a message
// naming the algorithm and the field.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		lim  sluice.Limit
		want string
	}{
		{sluice.Limit{}, "algorithm is not set (use a constructor such as sluice.TokenBucket)"},
		{sluice.FixedWindow(0, time.Second), "fixed_window: count must be at least 1 (got 0)"},
		{sluice.FixedWindow(-5, time.Second), "fixed_window: count must be at least 1 (got -5)"},
		{sluice.FixedWindow(10, 0), "fixed_window: window must be positive (got 0s)"},
		{sluice.SlidingWindow(10, -time.Second), "sliding_window: window must be positive (got -1s)"},
		{sluice.SlidingLog(10, 1500*time.Nanosecond), "sliding_log: window must be a whole number of microseconds (got 1.5µs)"},
		{sluice.SlidingLog(2_000_000, time.Second), "sliding_log: count must be at most 1000000 for sliding_log, which stores every request (got 2000000); use sliding_window"},
		{sluice.FixedWindow(10, 400*24*time.Hour), "fixed_window: window must be at most 366d (got 400d)"},
		{sluice.SlidingWindow(10, 48*time.Hour), "sliding_window: window must be at most 1d (got 2d)"},
		{sluice.WarmUp(sluice.Per(1<<30, 24*time.Hour), time.Second), "warm_up: count 1073741824 per 1d is too large to compute exactly (at most 104249 per 1d)"},
		{sluice.TokenBucket(sluice.PerSecond(10), 0), "token_bucket: burst must be at least 1 (got 0)"},
		{sluice.GCRA(sluice.Per(10, 0), 1), "gcra: period must be positive (got 0s)"},
		{sluice.TokenBucket(sluice.PerSecond(1), 1<<40), "token_bucket: burst 1099511627776 at 1/s is too large to compute exactly (at most 9007199254 at this rate)"},
		{sluice.LeakyBucket(sluice.PerSecond(10), -1), "leaky_bucket: queue must be at least 0 (got -1)"},
		{sluice.LeakyBucket(sluice.PerSecond(10), 5).WithNoDelay(6), "leaky_bucket: nodelay must be between 0 and the queue length 5 (got 6)"},
		{sluice.TokenBucket(sluice.PerSecond(10), 5).WithNoDelay(1), "token_bucket: nodelay is not used by token_bucket and must be left zero"},
		{sluice.WarmUp(sluice.PerSecond(5), 0), "warm_up: warmup must be positive (got 0s)"},
		{sluice.WarmUp(sluice.PerSecond(5), 2*time.Hour), "warm_up: warmup must be at most 1m (got 2h)"},
		{sluice.Concurrency(10, 0), "concurrency: lease_ttl must be positive (got 0s)"},
		{sluice.Limit{Algorithm: sluice.AlgorithmConcurrency, Count: 1, LeaseTTL: time.Second, Period: time.Second}, "concurrency: period is not used by concurrency and must be left zero"},
		{sluice.Limit{Algorithm: sluice.AlgorithmFixedWindow, Count: 1, Period: time.Second, Burst: 3}, "fixed_window: burst is not used by fixed_window and must be left zero"},
		{sluice.CalendarWindow(10, sluice.Month, "Europe/Atlantis"), `fixed_window: timezone "Europe/Atlantis" is not a known IANA time zone (such as Europe/Berlin or UTC)`},
		{sluice.CalendarWindow(10, sluice.Month, "Local"), `fixed_window: timezone "Local" is not an IANA time zone name (such as Europe/Berlin or UTC)`},
		{sluice.CalendarWindow(10, sluice.Calendar(9), ""), "fixed_window: calendar must be day, week, month or year (got 9)"},
		{sluice.Limit{Algorithm: sluice.AlgorithmSlidingWindow, Count: 1, Calendar: sluice.Day}, "sliding_window: calendar is not used by sliding_window (only fixed_window has calendar periods)"},
		{sluice.Limit{Algorithm: sluice.AlgorithmFixedWindow, Count: 1, Zone: "UTC", Period: time.Hour}, `fixed_window: timezone is set ("UTC") but no calendar period is`},
		{sluice.Limit{Algorithm: sluice.AlgorithmFixedWindow, Count: 1, Calendar: sluice.Day, Period: time.Hour}, "fixed_window: window must be left zero in a calendar window (got 1h): the calendar period is the window"},
	} {
		err := tc.lim.Validate()
		if !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%+v: got %v, want ErrInvalidLimit", tc.lim, err)
			continue
		}
		if want := "sluice: invalid limit: " + tc.want; err.Error() != want {
			t.Errorf("got  %q\nwant %q", err.Error(), want)
		}
	}
	if _, err := sluice.ParseAlgorithm("leaky"); err == nil {
		t.Error("ParseAlgorithm accepted an unknown name")
	}
}

// TestLimitError: the errors of Validate, ParseAlgorithm and Scale carry the
// algorithm, the field and the reason, and still wrap ErrInvalidLimit.
func TestLimitError(t *testing.T) {
	for _, tc := range []struct {
		err                         error
		alg                         sluice.Algorithm
		field, reason, detail, full string
	}{
		{sluice.TokenBucket(sluice.PerSecond(10), 0).Validate(), sluice.AlgorithmTokenBucket, "burst", "must be at least 1 (got 0)",
			"token_bucket: burst must be at least 1 (got 0)", "sluice: invalid limit: token_bucket: burst must be at least 1 (got 0)"},
		{sluice.Limit{}.Validate(), 0, "algorithm", "is not set (use a constructor such as sluice.TokenBucket)",
			"algorithm is not set (use a constructor such as sluice.TokenBucket)", "sluice: invalid limit: algorithm is not set (use a constructor such as sluice.TokenBucket)"},
		{second(sluice.ParseAlgorithm("leaky")), 0, "algorithm",
			`"leaky" is unknown (want one of fixed_window, sliding_log, sliding_window, token_bucket, gcra, leaky_bucket, warm_up, concurrency)`,
			`algorithm "leaky" is unknown (want one of fixed_window, sliding_log, sliding_window, token_bucket, gcra, leaky_bucket, warm_up, concurrency)`,
			`sluice: invalid limit: algorithm "leaky" is unknown (want one of fixed_window, sliding_log, sliding_window, token_bucket, gcra, leaky_bucket, warm_up, concurrency)`},
		{second(sluice.GCRA(sluice.PerSecond(1), 1).Scale(0)), sluice.AlgorithmGCRA, "scale", "must be above 0 and at most 1e+06 (got 0)",
			"gcra: scale must be above 0 and at most 1e+06 (got 0)", "sluice: invalid limit: gcra: scale must be above 0 and at most 1e+06 (got 0)"},
	} {
		var le *sluice.LimitError
		if !errors.As(tc.err, &le) || !errors.Is(tc.err, sluice.ErrInvalidLimit) {
			t.Errorf("%v: not a *LimitError wrapping ErrInvalidLimit", tc.err)
			continue
		}
		if le.Algorithm != tc.alg || le.Field != tc.field || le.Reason != tc.reason || le.Detail() != tc.detail || le.Error() != tc.full {
			t.Errorf("got  %v %q %q %q %q\nwant %v %q %q %q %q", le.Algorithm, le.Field, le.Reason, le.Detail(), le.Error(), tc.alg, tc.field, tc.reason, tc.detail, tc.full)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// TestIsRequestError: what every store's own validation returns is an error
// about the request, wrapped or not; a store's failure and the caller's
// deadline are not.
func TestIsRequestError(t *testing.T) {
	ctx := context.Background()
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	l := sluice.New(mem)
	bucket := sluice.TokenBucket(sluice.PerSecond(1), 2)
	for _, err := range []error{
		second(l.AllowN(ctx, "k", sluice.Limit{}, 1)),
		second(l.AllowN(ctx, "k", bucket, 3)),
		second(l.AllowN(ctx, "k", bucket, -1)),
		second(l.Check(ctx, sluice.Request{Key: "k", Limit: bucket, Cost: 1, MaxDelay: -1})),
		second(l.Check(ctx, sluice.Request{Key: "k", Limit: bucket, Cost: 1}, sluice.Request{Key: "k", Limit: bucket, Cost: 1})),
		second(l.Adjust(ctx, sluice.Request{Key: "k", Limit: sluice.Concurrency(1, time.Second), Cost: 1})),
	} {
		if !sluice.IsRequestError(err) || !sluice.IsRequestError(fmt.Errorf("wrapped: %w", err)) {
			t.Errorf("IsRequestError(%v) = false", err)
		}
	}
	for _, err := range []error{nil, errors.New("connection refused"), context.DeadlineExceeded, sluice.ErrClosed, sluice.ErrWouldExceedDeadline} {
		if sluice.IsRequestError(err) {
			t.Errorf("IsRequestError(%v) = true", err)
		}
	}
}

// everyAlgorithm is one valid limit of each algorithm; TestAlgorithmTable
// fails when an algorithm is added without a row here.
var everyAlgorithm = map[sluice.Algorithm]sluice.Limit{
	sluice.AlgorithmFixedWindow:   sluice.FixedWindow(100, time.Minute),
	sluice.AlgorithmSlidingLog:    sluice.SlidingLog(10, time.Second),
	sluice.AlgorithmSlidingWindow: sluice.SlidingWindow(100, time.Hour),
	sluice.AlgorithmTokenBucket:   sluice.TokenBucket(sluice.PerSecond(10), 20),
	sluice.AlgorithmGCRA:          sluice.GCRA(sluice.PerMinute(6), 3),
	sluice.AlgorithmLeakyBucket:   sluice.LeakyBucket(sluice.PerSecond(2), 5).WithNoDelay(5),
	sluice.AlgorithmWarmUp:        sluice.WarmUp(sluice.PerSecond(10), 10*time.Second),
	sluice.AlgorithmConcurrency:   sluice.Concurrency(4, time.Minute),
}

// TestAlgorithmTable: every algorithm has a name that parses back, the
// fields a configuration sets, and a quota and window to advertise.
func TestAlgorithmTable(t *testing.T) {
	type row struct {
		fields string
		quota  int64
		window time.Duration
	}
	want := map[sluice.Algorithm]row{
		sluice.AlgorithmFixedWindow:   {"limit window rate calendar timezone", 100, time.Minute},
		sluice.AlgorithmSlidingLog:    {"limit window rate", 10, time.Second},
		sluice.AlgorithmSlidingWindow: {"limit window rate", 100, time.Hour},
		sluice.AlgorithmTokenBucket:   {"rate burst", 20, 2 * time.Second},
		sluice.AlgorithmGCRA:          {"rate burst", 3, 30 * time.Second},
		sluice.AlgorithmLeakyBucket:   {"rate queue nodelay", 6, 3 * time.Second},
		sluice.AlgorithmWarmUp:        {"rate warmup", 10, time.Second},
		sluice.AlgorithmConcurrency:   {"limit lease_ttl", 4, 0},
	}
	algs := sluice.Algorithms()
	if len(algs) != len(want) || len(algs) != len(everyAlgorithm) {
		t.Fatalf("%d algorithms, %d rows here, %d in everyAlgorithm", len(algs), len(want), len(everyAlgorithm))
	}
	for _, a := range algs {
		if p, err := sluice.ParseAlgorithm(a.String()); p != a || err != nil {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a, p, err)
		}
		lim := everyAlgorithm[a]
		q, w := lim.Quota()
		got := row{fmt.Sprint(a.Fields()), q, w}
		got.fields = strings.Trim(got.fields, "[]")
		if got != want[a] {
			t.Errorf("%s: got %+v, want %+v", a, got, want[a])
		}
	}
	if sluice.Algorithm(0).Fields() != nil || sluice.Algorithm(99).Fields() != nil {
		t.Error("an unknown algorithm has fields")
	}
}

// TestScale is the one rule for scaling a limit, over every algorithm:
// counts rounded half away from zero and kept at least 1 (a queue and
// nodelay at least 0, nodelay at most the queue), durations kept.
func TestScale(t *testing.T) {
	for _, tc := range []struct {
		lim  sluice.Limit
		f    float64
		want sluice.Limit
	}{
		{sluice.FixedWindow(100, time.Minute), 0.25, sluice.FixedWindow(25, time.Minute)},
		{sluice.SlidingLog(10, time.Second), 0.05, sluice.SlidingLog(1, time.Second)}, // 0.5 rounds up
		{sluice.SlidingLog(10, time.Second), 0.01, sluice.SlidingLog(1, time.Second)}, // at least 1
		{sluice.SlidingWindow(3, time.Hour), 2.5, sluice.SlidingWindow(8, time.Hour)}, // 7.5 rounds up
		{sluice.TokenBucket(sluice.PerSecond(10), 20), 10, sluice.TokenBucket(sluice.PerSecond(100), 200)},
		{sluice.TokenBucket(sluice.PerSecond(10), 1), 0.1, sluice.TokenBucket(sluice.PerSecond(1), 1)},
		{sluice.GCRA(sluice.PerMinute(6), 3), 0.5, sluice.GCRA(sluice.PerMinute(3), 2)}, // 1.5 rounds up
		{sluice.LeakyBucket(sluice.PerSecond(2), 5).WithNoDelay(5), 2, sluice.LeakyBucket(sluice.PerSecond(4), 10).WithNoDelay(10)},
		{sluice.LeakyBucket(sluice.PerSecond(2), 5).WithNoDelay(2), 0.1, sluice.LeakyBucket(sluice.PerSecond(1), 1)},  // queue 0.5 → 1, nodelay 0.2 → 0
		{sluice.LeakyBucket(sluice.PerSecond(20), 1).WithNoDelay(1), 0.4, sluice.LeakyBucket(sluice.PerSecond(8), 0)}, // queue 0.4 → 0, nodelay ≤ queue
		{sluice.WarmUp(sluice.PerSecond(10), 10*time.Second), 3, sluice.WarmUp(sluice.PerSecond(30), 10*time.Second)},
		{sluice.Concurrency(4, time.Minute), 0.5, sluice.Concurrency(2, time.Minute)},
	} {
		got, err := tc.lim.Scale(tc.f)
		if err != nil || got != tc.want {
			t.Errorf("%s.Scale(%g) = %s, %v; want %s", tc.lim, tc.f, got, err, tc.want)
		}
	}
	for a, lim := range everyAlgorithm {
		if got, err := lim.Scale(1); err != nil || got != lim {
			t.Errorf("%s: Scale(1) = %s, %v; want the limit itself", a, got, err)
		}
		for _, f := range []float64{0, -1, 1e7} {
			if _, err := lim.Scale(f); !errors.Is(err, sluice.ErrInvalidLimit) {
				t.Errorf("%s: Scale(%g) = %v, want ErrInvalidLimit", a, f, err)
			}
		}
		if _, err := lim.Scale(1e6); a == sluice.AlgorithmSlidingLog && err == nil { // 10 million records
			t.Errorf("%s: Scale(1e6) passed", a)
		}
	}
	if _, err := (sluice.Limit{}).Scale(2); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Error("an invalid limit scaled")
	}
}
