package shed

import (
	"context"
	"math"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/httplimit"
)

// TestLimiterProperties drives a Limiter on a fake clock with random
// arrivals of every priority and random ends (Done, Drop, Ignore), with
// Gradient2 or Vegas, and checks it against a model of what it promises:
// the in-flight count is the number of tokens not yet ended; a request is
// admitted exactly when fewer than its class's capacity (the limit, or
// ceil(share × limit) for sheddable) are in flight; the limit stays within
// its bounds; and the counters add up.
func TestLimiterProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		now := time.Unix(0, 0)
		var alg Algorithm = &Vegas{}
		if rapid.Bool().Draw(t, "gradient2") {
			alg = &Gradient2{}
		}
		cfg := Config{
			Algorithm: alg, MinLimit: rapid.IntRange(1, 5).Draw(t, "min"), MaxLimit: rapid.IntRange(5, 40).Draw(t, "max"),
			InitialLimit: 5, MinSamples: rapid.IntRange(1, 5).Draw(t, "samples"), Window: 10 * time.Millisecond,
			SheddableShare: rapid.Float64Range(0.1, 1).Draw(t, "share"), CriticalWait: -1,
			Now: func() time.Time { return now },
		}
		l, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var open []Token
		var admitted, shed uint64
		for range rapid.IntRange(1, 300).Draw(t, "steps") {
			now = now.Add(time.Duration(rapid.IntRange(0, 5000).Draw(t, "µs")) * time.Microsecond)
			if len(open) > 0 && rapid.Bool().Draw(t, "end") {
				i := rapid.IntRange(0, len(open)-1).Draw(t, "which")
				switch rapid.IntRange(0, 2).Draw(t, "how") {
				case 0:
					open[i].Done()
				case 1:
					open[i].Drop()
				default:
					open[i].Ignore()
				}
				open = append(open[:i], open[i+1:]...)
			} else {
				p := Priorities[rapid.IntRange(0, 2).Draw(t, "priority")]
				st := l.Stats()
				capacity := st.Limit
				if p == Sheddable {
					capacity = int(math.Ceil(float64(st.Limit) * cfg.SheddableShare))
				}
				tok, err := l.Acquire(context.Background(), p)
				if (err == nil) != (st.InFlight < capacity) {
					t.Fatalf("%v with %d in flight of %d (capacity %d): err %v", p, st.InFlight, st.Limit, capacity, err)
				}
				if err == nil {
					open = append(open, tok)
					admitted++
				} else {
					shed++
				}
			}
			checkStats(t, l.Stats(), cfg, len(open), admitted, shed)
		}
	})
}

// checkStats checks a Limiter's stats against the model's counts.
func checkStats(t *rapid.T, st Stats, cfg Config, open int, admitted, shed uint64) {
	if st.InFlight != open || st.Limit < cfg.MinLimit || st.Limit > cfg.MaxLimit || st.Waiting != 0 {
		t.Fatalf("stats %+v with %d tokens open, limit bounds %d..%d", st, open, cfg.MinLimit, cfg.MaxLimit)
	}
	var a, s uint64
	for _, c := range st.Classes {
		a, s = a+c.Admitted, s+c.Shed
	}
	if a != admitted || s != shed {
		t.Fatalf("counters %d admitted %d shed, want %d and %d", a, s, admitted, shed)
	}
}

// FuzzHeaderPriority: whatever a client or proxy sends as the priority
// header, the answer is a priority, never a panic; from an untrusted peer
// it is always Default, and from a trusted one it is not Default only for
// the exact names.
func FuzzHeaderPriority(f *testing.F) {
	for _, s := range []string{"critical", "SHEDDABLE", "default", "", "crit\x00", strings.Repeat("c", 5000)} {
		f.Add(s, true)
	}
	trusted := &httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	prio := HeaderPriority("Sluice-Priority", trusted)
	f.Fuzz(func(t *testing.T, v string, fromProxy bool) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113.9:1"
		if fromProxy {
			r.RemoteAddr = "10.0.0.1:1"
		}
		r.Header["Sluice-Priority"] = []string{v}
		got := prio(r)
		switch {
		case !fromProxy && got != Default:
			t.Fatalf("%q from an untrusted peer: %v", v, got)
		case got != Default && !strings.EqualFold(v, got.String()):
			t.Fatalf("%q read as %v", v, got)
		}
	})
}
