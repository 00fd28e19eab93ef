package sluiceclient

import (
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// A server that refuses everything sees at most (1 + BudgetRatio) × the
// original requests, plus the floor, however many retries each request is
// allowed; without the budget it would see 1 + MaxRetries times as many.
func TestBudgetBoundsRetriesAgainstARefusingServer(t *testing.T) {
	for _, tc := range []struct {
		ratio float64
		floor int
	}{{0.1, 10}, {0.2, -1}, {-1, 5}} {
		synctest.Test(t, func(t *testing.T) {
			const n = 300
			var h hits
			tr := serve(t, h.wrap(refuse(503)))
			c := newClient(t, tr, Config{MaxRetries: 5, BudgetRatio: tc.ratio, BudgetFloor: tc.floor})
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					if code, _, err := get(t, t.Context(), c); code != 503 || err != nil {
						t.Errorf("got %d %v, want the server's 503", code, err)
					}
				})
			}
			wg.Wait()
			// Every retry came within one budget window (backoffs add up to
			// less than 16 s, checked here), so the bound is for one window.
			at := h.all()
			if span := at[len(at)-1].Sub(at[0]); span >= 10*time.Second {
				t.Fatalf("retries spread over %s, more than one window", span)
			}
			bound := int(float64(n)*(1+max(tc.ratio, 0))) + max(tc.floor, 0)
			if len(at) > bound || len(at) < bound-1 {
				t.Fatalf("ratio %v floor %d: server saw %d requests, want %d (the budget, spent)", tc.ratio, tc.floor, len(at), bound)
			}
		})
	}
}

// The budget refills as requests leave its window.
func TestBudgetWindowSlides(t *testing.T) {
	b := newBudget(settings{Config: Config{BudgetRatio: 0.5, BudgetFloor: -1, BudgetWindow: 10 * time.Second}})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 4 {
		b.request(t0)
	}
	got := []bool{b.withdraw(t0), b.withdraw(t0), b.withdraw(t0.Add(5 * time.Second))}
	if !slices.Equal(got, []bool{true, true, false}) {
		t.Fatalf("withdrawals at 0, 0, 5 s after 4 requests at ratio 0.5: %v", got)
	}
	// After the window the requests have left: no budget without new ones.
	if b.withdraw(t0.Add(11 * time.Second)) {
		t.Fatal("withdrew after every request left the window")
	}
	b.request(t0.Add(11 * time.Second))
	b.request(t0.Add(11 * time.Second))
	if !b.withdraw(t0.Add(11 * time.Second)) {
		t.Fatal("no budget after two new requests at ratio 0.5")
	}
}

// Clients refused together come back spread out: 1,000 clients told
// Retry-After: 1 at the same instant retry between 1 s and 1.5 s later
// (500ms of full jitter), spread evenly over that span.
func TestJitterSpreadsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const clients = 1000
		var h hits
		start := time.Now()
		tr := serve(t, h.wrap(limitedUntil(start.Add(time.Second))))
		var wg sync.WaitGroup
		for range clients {
			c := newClient(t, tr, Config{})
			wg.Go(func() {
				if code, _, err := get(t, t.Context(), c); code != 200 || err != nil {
					t.Errorf("got %d %v", code, err)
				}
			})
		}
		wg.Wait()
		var retries []float64
		for _, at := range h.all() {
			if d := at.Sub(start); d > 0 {
				retries = append(retries, d.Seconds())
			}
		}
		if len(retries) != clients {
			t.Fatalf("%d retries, want %d", len(retries), clients)
		}
		// Ten 50ms buckets over [1s, 1.5s): about 100 each.
		var counts [10]int
		for _, s := range retries {
			i := int((s - 1) / 0.05)
			if i < 0 || i >= 10 {
				t.Fatalf("a retry %.3fs after the refusal, want within [1s, 1.5s)", s)
			}
			counts[i]++
		}
		mean, sd := meanSD(retries)
		t.Logf("retry times: mean %.3fs, sd %.3fs, per 50ms %v", mean, sd, counts)
		for _, k := range counts {
			if k < 50 || k > 160 { // 100 expected; sd of a bucket ≈ 9.5
				t.Fatalf("retries per 50ms %v, want about 100 each", counts)
			}
		}
	})
}

func meanSD(xs []float64) (mean, sd float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)))
}

// Adaptive throttling is off by default; with K = 2 a client facing a
// server that refuses everything stops sending most requests (the expected
// number sent out of n is about ln n), and a healthy server is never
// throttled.
func TestAdaptiveThrottling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h hits
		tr := serve(t, h.wrap(refuse(503)))
		count := func(cfg Config) (sent, throttled int) {
			before := len(h.all())
			c := newClient(t, tr, cfg)
			for range 1000 {
				_, _, err := get(t, t.Context(), c)
				if errors.Is(err, ErrThrottled) {
					throttled++
				} else if err != nil {
					t.Fatal(err)
				}
			}
			return len(h.all()) - before, throttled
		}
		if sent, throttled := count(Config{MaxRetries: -1}); sent != 1000 || throttled != 0 {
			t.Fatalf("off by default: sent %d, throttled %d", sent, throttled)
		}
		sent, throttled := count(Config{MaxRetries: -1, ThrottleK: 2})
		if sent+throttled != 1000 || sent > 40 {
			t.Fatalf("K=2 against a refusing server: sent %d, throttled %d; want about ln(1000) ≈ 7 sent", sent, throttled)
		}
		t.Logf("K=2, all refused: %d of 1000 sent", sent)
	})
	synctest.Test(t, func(t *testing.T) {
		tr := serve(t, ok200)
		c := newClient(t, tr, Config{ThrottleK: 1})
		for i := range 1000 {
			if code, _, err := get(t, t.Context(), c); code != 200 || err != nil {
				t.Fatalf("request %d to a healthy server: %d %v", i, code, err)
			}
		}
	})
}

// The throttle rejects with probability (requests − K·accepts)/(requests + 1)
// over the requests before the attempt: a step table with a fixed draw.
func TestThrottleProbability(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	step := func(requests, accepts int, draw float64) bool {
		th := &throttle{k: 2, rand: func() float64 { return draw }, w: newWindow(time.Minute)}
		for range requests {
			th.w.add(t0, 1, 0)
		}
		for range accepts {
			th.accepted(t0)
		}
		return th.admit(t0)
	}
	for _, tc := range []struct {
		requests, accepts int
		draw              float64
		want              bool
	}{
		{0, 0, 0, true},      // p = 0
		{10, 5, 0, true},     // p = (10 − 2·5)/11 = 0
		{10, 4, 0.19, true},  // p = 2/11 ≈ 0.182: a draw at or above p admits
		{10, 4, 0.18, false}, // a draw below p rejects
		{10, 0, 0.91, true},  // p = 10/11 ≈ 0.909
		{10, 0, 0.90, false},
		{100, 0, 0.991, true}, // p = 100/101 ≈ 0.9901
		{100, 0, 0.989, false},
	} {
		if got := step(tc.requests, tc.accepts, tc.draw); got != tc.want {
			t.Errorf("K=2, %d requests, %d accepts, draw %v: admit %v, want %v", tc.requests, tc.accepts, tc.draw, got, tc.want)
		}
	}
}
