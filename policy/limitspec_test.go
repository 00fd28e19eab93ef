package policy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

func TestParseLimit(t *testing.T) {
	good := map[string]sluice.Limit{
		`{algorithm: token_bucket, rate: 100/s, burst: 20}`:           sluice.TokenBucket(sluice.PerSecond(100), 20),
		`{"algorithm": "gcra", "rate": "10/m"}`:                       sluice.GCRA(sluice.PerMinute(10), 10),
		`{"algorithm": "sliding_window", "limit": 5, "window": "1m"}`: sluice.SlidingWindow(5, time.Minute),
		`{algorithm: fixed_window, rate: 100/h}`:                      sluice.FixedWindow(100, time.Hour),
		`{algorithm: concurrency, limit: 3, lease_ttl: 30s}`:          sluice.Concurrency(3, 30*time.Second),
		`{algorithm: leaky_bucket, rate: 2/s, queue: 4, nodelay: 1}`:  sluice.LeakyBucket(sluice.PerSecond(2), 4).WithNoDelay(1),
		// calendar windows; 1d without calendar or timezone keeps its
		// meaning, 24 hours from the epoch
		`{algorithm: fixed_window, limit: 5, window: 1mo, timezone: Europe/Berlin}`:   sluice.CalendarWindow(5, sluice.Month, "Europe/Berlin"),
		`{algorithm: fixed_window, limit: 5, window: 1y}`:                             sluice.CalendarWindow(5, sluice.Year, ""),
		`{algorithm: fixed_window, limit: 5, window: 1w, calendar: true}`:             sluice.CalendarWindow(5, sluice.Week, ""),
		`{algorithm: fixed_window, limit: 5, window: 1d, timezone: America/New_York}`: sluice.CalendarWindow(5, sluice.Day, "America/New_York"),
		`{algorithm: gcra, rate: 10/m, version: 2}`:                                   sluice.GCRA(sluice.PerMinute(10), 10).WithVersion(2),
		`{algorithm: fixed_window, limit: 5, window: 1d}`:                             sluice.FixedWindow(5, 24*time.Hour),
		`{algorithm: fixed_window, limit: 5, window: 1d, calendar: false}`:            sluice.FixedWindow(5, 24*time.Hour),
	}
	for in, want := range good {
		got, err := policy.ParseLimit("req", []byte(in))
		if err != nil || got != want {
			t.Errorf("ParseLimit(%s) = %v, %v; want %v", in, got, err, want)
		}
	}
	bad := map[string]string{
		``:                                    "req: want a limit such as",
		`[1, 2]`:                              `req:1: want a limit such as`,
		`{rate: 1/s}`:                         `req:1: algorithm: missing`,
		`{algorithm: token_bucket, brust: 2}`: `unknown field "brust"`,
		`{algorithm: token_bucket, rate: 1/s, window: 1m}`:                             `window: not used by token_bucket`,
		`{algorithm: fixed_window, rate: 0/s}`:                                         `count must be at least 1`,
		`{algorithm: nope}`:                                                            `algorithm:`,
		`{algorithm: gcra, rate: 5/s, burst: -1}`:                                      `burst: must be at least 1`,
		`{algorithm: fixed_window, limit: 5, window: 1mo, timezone: Nowhere/Land}`:     `timezone: "Nowhere/Land" is not a known IANA time zone`,
		`{algorithm: fixed_window, limit: 5, window: 1mo, timezone: Local}`:            `timezone: "Local" is not an IANA time zone name`,
		`{algorithm: fixed_window, limit: 5, window: 1mo, timezone: ../../etc/passwd}`: `is not a known IANA time zone`,
	}
	for in, want := range bad {
		_, err := policy.ParseLimit("req", []byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLimit(%q) error = %v, want it to contain %q", in, err, want)
		}
	}
}

func ExampleParseLimit() {
	l, err := policy.ParseLimit("request body", []byte(`{"algorithm": "token_bucket", "rate": "10/s", "burst": 20}`))
	fmt.Println(l, err)
	_, err = policy.ParseLimit("request body", []byte(`{"algorithm": "token_bucket", "rate": "10/s", "window": "1m"}`))
	fmt.Println(err)
	// Output:
	// token_bucket(10/s, burst 20) <nil>
	// policy: invalid: request body:1: window: not used by token_bucket (it takes rate, burst)
}

// TestParseLimitEveryAlgorithm: the loader reads every field of every
// algorithm sluice has (a new algorithm whose parameters it cannot read
// fails here).
func TestParseLimitEveryAlgorithm(t *testing.T) {
	sample := map[string]string{"limit": "5", "window": "1s", "rate": "5/s", "burst": "5", "queue": "5", "nodelay": "1", "warmup": "10s", "lease_ttl": "30s"}
	for _, alg := range sluice.Algorithms() {
		spec := "{algorithm: " + alg.String()
		for _, f := range alg.Fields() {
			if f == "calendar" || f == "timezone" {
				continue // calendar windows: TestParseLimit
			}
			v, ok := sample[f]
			if !ok {
				t.Fatalf("%s: no sample value for %s", alg, f)
			}
			if (f == "limit" || f == "window") && slices.Contains(alg.Fields(), "rate") {
				continue // the window algorithms take rate, or limit and window
			}
			spec += ", " + f + ": " + v
		}
		lim, err := policy.ParseLimit("req", []byte(spec+"}"))
		if err != nil || lim.Algorithm != alg || lim.Validate() != nil {
			t.Errorf("ParseLimit(%s}) = %s, %v", spec, lim, err)
		}
	}
}
