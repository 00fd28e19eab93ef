package algo

import (
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"pgregory.net/rapid"
)

// move is one operation on a fixed timeline: a take of cost (adjust
// false) or an adjustment by the signed delta cost, and the decision it
// must get (for an adjustment, the peek after it).
type move struct {
	at     time.Duration
	cost   int64
	adjust bool
	want   sluice.Decision
}

func take(at time.Duration, cost int64, want sluice.Decision) move {
	return move{at: at, cost: cost, want: want}
}

func adj(at time.Duration, delta int64, want sluice.Decision) move {
	return move{at: at, cost: delta, adjust: true, want: want}
}

func runMoves(t *testing.T, l sluice.Limit, moves []move) {
	t.Helper()
	p := compile(t, l)
	var st State
	for i, m := range moves {
		now := t0 + int64(m.at/us)
		var got sluice.Decision
		if m.adjust {
			if err := p.CheckAdjust(sluice.Request{Limit: l, Cost: m.cost}); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			got = Adjust(&p, &st, now, m.cost)
		} else {
			got = Step(&p, &st, now, m.cost, NoMaxDelay, 0, true)
		}
		want := m.want
		if want.Limit == 0 {
			want.Limit = l.Capacity()
			if l.Algorithm == sluice.AlgorithmWarmUp {
				want.Limit = 1
			}
		}
		if got != want {
			t.Errorf("%s step %d (t=%s cost %d adjust %v):\n got %+v\nwant %+v", l, i, m.at, m.cost, m.adjust, got, want)
		}
	}
}

// peekYes is what a peek reports when a unit-cost request would pass.
func peekYes(remaining int64, reset time.Duration) sluice.Decision {
	return sluice.Decision{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

func TestAdjustFixedWindow(t *testing.T) {
	runMoves(t, sluice.FixedWindow(3, s), []move{
		take(0, 2, yes(1, s)),
		adj(100*ms, 3, no(0, 900*ms, 900*ms)),   // 5 of 3: two owed, the window pays them back
		take(200*ms, 1, no(0, 800*ms, 800*ms)),  // in debt: refused
		adj(300*ms, 12, no(0, 700*ms, 700*ms)),  // the debt stops at 4 capacities past the limit (15)
		adj(400*ms, -12, no(0, 600*ms, 600*ms)), // 15-12: the count, still no room
		adj(450*ms, -1, peekYes(1, 550*ms)),
		adj(500*ms, -3, peekYes(3, 0)),  // never below empty
		take(600*ms, 3, yes(0, 400*ms)), // the refund left the whole count, no more
		take(s, 1, yes(2, s)),           // a new window owes nothing
		adj(s, 0, peekYes(2, s)),
	})
}

func TestAdjustSlidingLog(t *testing.T) {
	runMoves(t, sluice.SlidingLog(3, s), []move{
		take(0, 1, yes(2, s)),
		adj(100*ms, 3, no(0, s, s)),       // 4 of 3; a unit waits until 100ms's 3 leave
		take(s, 1, no(0, 100*ms, 100*ms)), // 0's record left; 3 still there
		adj(s, -2, peekYes(2, 100*ms)),    // refunded from the newest record
		take(1100*ms, 3, yes(0, s)),       // the last record left
		adj(1100*ms, -3, peekYes(3, 0)),   // never below empty
		adj(1200*ms, 12, no(0, s, s)),
		adj(1200*ms, 12, no(0, s, s)), // at most 15 recorded
		adj(1300*ms, -12, no(0, 900*ms, 900*ms)),
		adj(1300*ms, -1, peekYes(1, 900*ms)),
	})
}

func TestAdjustSlidingWindow(t *testing.T) {
	runMoves(t, sluice.SlidingWindow(10, s), []move{
		adj(0, 10, no(0, 1099991*us, 2*s)),
		adj(0, 2, no(0, 1249985*us, 2*s)),    // 12 of 10 in this window
		adj(500*ms, -5, peekYes(3, 1500*ms)), // 7
		take(s, 1, yes(2, 2*s)),              // the previous window's 7 weigh fully
		adj(s, -9, peekYes(10, 0)),           // 1 from this window, the rest from the last
		adj(s, 40, no(0, 1774994*us, 2*s)),
		adj(s, 40, no(0, 1819993*us, 2*s)), // at most 50 in a window
		adj(s, -40, no(0, 1099991*us, 2*s)),
		adj(s, -1, peekYes(1, 2*s)),
	})
}

func TestAdjustBuckets(t *testing.T) {
	for _, l := range []sluice.Limit{sluice.TokenBucket(sluice.PerSecond(10), 10), sluice.GCRA(sluice.PerSecond(10), 10)} {
		runMoves(t, l, []move{
			take(0, 10, yes(0, s)),
			adj(0, 5, no(0, 600*ms, 1500*ms)),        // 5 owed past empty
			adj(0, 40, no(0, 4100*ms, 5*s)),          // at most 4 buckets owed
			take(500*ms, 1, no(0, 3600*ms, 4500*ms)), // paid back at the rate
			adj(500*ms, -40, peekYes(5, 500*ms)),
			adj(600*ms, -10, peekYes(10, 0)), // never above full
			take(600*ms, 10, yes(0, s)),
			adj(600*ms, 0, no(0, 100*ms, s)),
		})
	}
}

func TestAdjustLeakyBucket(t *testing.T) {
	runMoves(t, sluice.LeakyBucket(sluice.PerSecond(10), 9), []move{
		adj(0, 5, sluice.Decision{Allowed: true, Remaining: 5, ResetAfter: 500 * ms, Delay: 500 * ms}),
		adj(0, 10, no(0, 600*ms, 1500*ms)),
		adj(0, 40, no(0, 4100*ms, 5*s)), // at most 4 queues owed past full
		adj(s, -40, sluice.Decision{Allowed: true, Remaining: 10}),
	})
}

func TestAdjustWarmUp(t *testing.T) {
	one := func(retry time.Duration) sluice.Decision {
		return sluice.Decision{RetryAfter: retry, ResetAfter: retry}
	}
	runMoves(t, sluice.WarmUp(sluice.PerSecond(10), s), []move{
		adj(0, 2, one(200*ms)), // 2 at the stable rate
		adj(0, 10, one(1200*ms)),
		adj(0, 40, one(4*s)), // at most 4 periods ahead
		adj(0, -5, one(3500*ms)),
		adj(0, -30, one(500*ms)),
		adj(0, -10, sluice.Decision{Allowed: true, Remaining: 1}), // never before now
	})
}

func TestCheckAdjust(t *testing.T) {
	p := compile(t, sluice.TokenBucket(sluice.PerSecond(10), 10))
	l := sluice.TokenBucket(sluice.PerSecond(10), 10)
	for _, c := range []int64{-10, 0, 10} {
		if err := p.CheckAdjust(sluice.Request{Limit: l, Cost: c}); err != nil {
			t.Errorf("delta %d: %v", c, err)
		}
	}
	for _, c := range []int64{-41, 41} {
		err := p.CheckAdjust(sluice.Request{Limit: l, Cost: c})
		if !errors.Is(err, sluice.ErrCostExceedsCapacity) {
			t.Errorf("delta %d: got %v, want ErrCostExceedsCapacity", c, err)
		}
	}
	cl := sluice.Concurrency(5, s)
	pc := compile(t, cl)
	if err := pc.CheckAdjust(sluice.Request{Key: "k", Limit: cl, Cost: 1}); !errors.Is(err, sluice.ErrNotAdjustable) {
		t.Errorf("concurrency: got %v, want ErrNotAdjustable", err)
	}
}

// TestPropertySettleBucket: requests reserve a cost, and settle their
// actual cost later (in any order), against a reference bucket in rational
// arithmetic whose debt may go past empty by at most 4 buckets. Every
// decision matches, and the room is never more than the bucket.
func TestPropertySettleBucket(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		burst := rapid.Int64Range(1, 20).Draw(t, "burst")
		per := rapid.Int64Range(1, 5_000).Draw(t, "period")
		n := rapid.Int64Range(1, 5).Draw(t, "count")
		l := sluice.TokenBucket(Rate(n, per), burst)
		if rapid.Bool().Draw(t, "gcra") {
			l = sluice.GCRA(Rate(n, per), burst) // the same bucket, kept as a time
		}
		if l.Validate() != nil {
			t.Skip("a rate and burst no Limit accepts (Validate): not a case")
		}
		p := mustCompile(t, l)
		rate := big.NewRat(n, per)
		full := new(big.Rat).SetInt64(burst)
		debt := new(big.Rat)
		var st State
		var owed []int64 // reservations not yet settled
		at, last := int64(0), int64(0)
		for i := range rapid.IntRange(1, 200).Draw(t, "ops") {
			at += rapid.Int64Range(0, 2*per).Draw(t, "gap")
			debt.Sub(debt, new(big.Rat).Mul(rate, big.NewRat(at-last, 1)))
			if debt.Sign() < 0 {
				debt.SetInt64(0)
			}
			last = at
			var d sluice.Decision
			var allowed bool
			if len(owed) > 0 && rapid.Bool().Draw(t, "settle") {
				k := rapid.IntRange(0, len(owed)-1).Draw(t, "which")
				delta := rapid.Int64Range(0, sluice.AdjustCapacities*burst).Draw(t, "actual") - owed[k]
				owed = append(owed[:k], owed[k+1:]...)
				d = Adjust(&p, &st, t0+at, delta)
				refAdjust(debt, full, delta)
				allowed = refHas(debt, full, 1)
			} else {
				c := rapid.Int64Range(0, burst).Draw(t, "reserve")
				d = Step(&p, &st, t0+at, c, NoMaxDelay, 0, true)
				allowed = refHas(debt, full, max(c, 1))
				if allowed && c > 0 {
					debt.Add(debt, big.NewRat(c, 1))
				}
				if d.Allowed {
					owed = append(owed, c)
				}
			}
			left := new(big.Rat).Sub(full, debt)
			remaining := int64(0)
			if left.Sign() > 0 {
				remaining = new(big.Int).Quo(left.Num(), left.Denom()).Int64()
			}
			if d.Allowed != allowed || d.Remaining != remaining {
				t.Fatalf("op %d at %d: got allowed %v remaining %d, reference %v %d (debt %s)", i, at, d.Allowed, d.Remaining, allowed, remaining, debt.FloatString(3))
			}
			if d.Remaining > burst {
				t.Fatalf("op %d: remaining %d above the burst %d", i, d.Remaining, burst)
			}
		}
	})
}

func refHas(debt, full *big.Rat, c int64) bool {
	return new(big.Rat).Add(debt, big.NewRat(c, 1)).Cmp(full) <= 0
}

// refAdjust is the reference adjustment: a charge up to five buckets
// (never lowering a deeper debt), a refund down to zero.
func refAdjust(debt, full *big.Rat, delta int64) {
	next := new(big.Rat).Add(debt, big.NewRat(delta, 1))
	switch {
	case delta < 0 && next.Sign() < 0:
		debt.SetInt64(0)
	case delta < 0:
		debt.Set(next)
	default:
		ceiling := new(big.Rat).Mul(full, big.NewRat(1+sluice.AdjustCapacities, 1))
		if next.Cmp(ceiling) > 0 {
			next = ceiling
		}
		if next.Cmp(debt) > 0 {
			debt.Set(next)
		}
	}
}

// TestPropertySettleWindows: within one window, whatever the order of
// takes and settles, the count recorded is the sum of the actual costs of
// the settled requests and the reservations of the others, as long as it
// stays within 4 capacities past the limit; and the room never exceeds
// the count.
func TestPropertySettleWindows(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Int64Range(1, 50).Draw(t, "count")
		alg := rapid.SampledFrom([]sluice.Algorithm{sluice.AlgorithmFixedWindow, sluice.AlgorithmSlidingLog, sluice.AlgorithmSlidingWindow}).Draw(t, "alg")
		l := sluice.Limit{Algorithm: alg, Count: n, Period: time.Hour}
		p := mustCompile(t, l)
		var st State
		var owed []int64
		total := int64(0) // what the reference says is charged
		at := int64(0)
		for i := range rapid.IntRange(1, 100).Draw(t, "ops") {
			at += rapid.Int64Range(0, 1000).Draw(t, "gap")
			var d sluice.Decision
			if len(owed) > 0 && rapid.Bool().Draw(t, "settle") {
				k := rapid.IntRange(0, len(owed)-1).Draw(t, "which")
				actual := rapid.Int64Range(0, sluice.AdjustCapacities*n).Draw(t, "actual")
				if total-owed[k]+actual > (1+sluice.AdjustCapacities)*n {
					continue // past the debt's bound: dropped, checked by the tables
				}
				d = Adjust(&p, &st, t0+at, actual-owed[k])
				total += actual - owed[k]
				owed = append(owed[:k], owed[k+1:]...)
			} else {
				c := rapid.Int64Range(1, n).Draw(t, "reserve")
				if d = Step(&p, &st, t0+at, c, NoMaxDelay, 0, true); d.Allowed {
					owed = append(owed, c)
					total += c
				}
			}
			if st.Y != total {
				t.Fatalf("op %d: %s recorded %d, the costs add up to %d", i, alg, st.Y, total)
			}
			if want := max(0, n-total); d.Remaining != want {
				t.Fatalf("op %d: remaining %d, want %d", i, d.Remaining, want)
			}
		}
	})
}
