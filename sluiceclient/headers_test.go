package sluiceclient

import (
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestRetryAfterField(t *testing.T) {
	now := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"2", 2 * time.Second, true},
		{" 0 ", 0, true},
		{"Wed, 02 Dec 2026 05:00:07 GMT", 7 * time.Second, true},
		{"Wednesday, 02-Dec-26 05:00:07 GMT", 7 * time.Second, true}, // RFC 850, obsolete but allowed
		{"Wed, 02 Dec 2026 04:59:00 GMT", 0, true},                   // in the past: no wait
		{"99999999999999999999", 0, false},
		{"9999999999999", maxHeaderSeconds * time.Second, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"", 0, false},
	} {
		h := http.Header{}
		if tc.v != "" {
			h.Set("Retry-After", tc.v)
		}
		got, ok := retryAfter(h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Retry-After %q = %s, %v; want %s, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRateLimitField(t *testing.T) {
	for _, tc := range []struct {
		v    []string
		want quota
		ok   bool
	}{
		{[]string{`"name";r=0;t=5`}, quota{0, 5 * time.Second}, true},
		{[]string{`"global";r=120;t=1, "per-ip";r=3;t=60`}, quota{3, 60 * time.Second}, true},
		{[]string{`"a";r=0;t=2, "b";r=0;t=9, "c";r=5;t=1`}, quota{0, 9 * time.Second}, true},
		{[]string{`"a";r=10;t=1`, `"b";r=0;t=3`}, quota{0, 3 * time.Second}, true},
		{[]string{`"x, y";r=1;t=4`}, quota{1, 4 * time.Second}, true}, // comma in a name
		{[]string{`"q\";r=0;t=99";r=2;t=4`}, quota{2, 4 * time.Second}, true},
		{[]string{`"a";r=1`, `"b";t=1`, `"c";r=x;t=1`, `"d";r=-1;t=1`}, quota{}, false},
		{[]string{`garbage`, ``}, quota{}, false},
		{nil, quota{}, false},
	} {
		h := http.Header{"Ratelimit": tc.v}
		got, ok := rateLimit(h)
		if got != tc.want || ok != tc.ok {
			t.Errorf("RateLimit %q = %+v, %v; want %+v, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{BaseBackoff: -1}, "Config.BaseBackoff"},
		{Config{BudgetWindow: -time.Second}, "Config.BudgetWindow"},
		{Config{BudgetRatio: 2}, "Config.BudgetRatio"},
		{Config{BudgetRatio: math.NaN()}, "Config.BudgetRatio"},
		{Config{ThrottleK: 0.5}, "Config.ThrottleK"},
		{Config{ThrottleK: -2}, "Config.ThrottleK"},
		{Config{IdempotencyKeyHeader: "Idempotency Key"}, "Config.IdempotencyKeyHeader"},
		{Config{IdempotencyKeyHeader: strings.Repeat("K", 129)}, "Config.IdempotencyKeyHeader"}, // 128 bytes at most
	} {
		_, err := New(tc.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.HasPrefix(err.Error(), "sluiceclient: "+tc.field) {
			t.Errorf("New(%+v) = %v, want a *ConfigError for %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := New(Config{}); err != nil {
		t.Fatalf("the zero Config: %v", err)
	}
}

// The backoff ceiling doubles per attempt up to MaxBackoff, without
// overflowing for large attempt numbers.
func TestBackoffCeiling(t *testing.T) {
	c, _ := New(Config{BaseBackoff: time.Second, MaxBackoff: 10 * time.Second})
	c.jitter = func() float64 { return 0.999999 }
	for n, want := range map[int]time.Duration{0: time.Second, 1: 2 * time.Second, 3: 8 * time.Second, 4: 10 * time.Second, 70: 10 * time.Second} {
		if got := c.backoff(n); got > want || got < want-want/1000 {
			t.Errorf("backoff(%d) = %s, want just under %s", n, got, want)
		}
	}
}
