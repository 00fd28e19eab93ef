package sluice_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
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
