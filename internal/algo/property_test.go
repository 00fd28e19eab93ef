package algo

import (
	"math/big"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"pgregory.net/rapid"
)

// Property tests: random traffic against small reference models written
// independently of the steps (rational arithmetic, plain lists), and the
// guarantee each limit documents checked on the admitted requests.

// event is one request of a generated trace.
type event struct {
	at   int64 // µs since t0
	cost int64
}

// genTrace draws requests at non-decreasing times (with the given largest
// gap) and costs in [1, maxCost]; back, if set, lets the clock jump
// backwards now and then.
func genTrace(t *rapid.T, maxGap, maxCost int64, back bool) []event {
	n := rapid.IntRange(1, 300).Draw(t, "n")
	evs := make([]event, n)
	at := int64(0)
	for i := range evs {
		gap := rapid.Int64Range(0, maxGap).Draw(t, "gap")
		if back && rapid.IntRange(0, 9).Draw(t, "backwards") == 0 {
			gap = -gap
		}
		at = max(0, at+gap)
		evs[i] = event{at: at, cost: rapid.Int64Range(1, maxCost).Draw(t, "cost")}
	}
	return evs
}

// admitted is a request the step admitted.
type admitted struct {
	at, cost int64
}

// play runs a trace through Step and returns what was admitted, in order.
func play(t *rapid.T, l sluice.Limit, evs []event) []admitted {
	p, err := Compile(l)
	if err != nil {
		t.Fatalf("Compile(%s): %v", l, err)
	}
	var st State
	var out []admitted
	for _, e := range evs {
		if Step(&p, &st, t0+e.at, e.cost, NoMaxDelay, 0, true).Allowed {
			out = append(out, admitted{e.at, e.cost})
		}
	}
	return out
}

// maxInWindow returns the largest total cost admitted within any half-open
// interval [t, t+w).
func maxInWindow(as []admitted, w int64) int64 {
	best := int64(0)
	for i := range as {
		sum := int64(0)
		for j := range as {
			if as[j].at >= as[i].at && as[j].at < as[i].at+w {
				sum += as[j].cost
			}
		}
		best = max(best, sum)
	}
	return best
}

func TestPropertySlidingLogExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Int64Range(1, 20).Draw(t, "n")
		w := rapid.Int64Range(1, 2_000_000).Draw(t, "window")
		evs := genTrace(t, w/4+1, n, false)
		got := play(t, sluice.SlidingLog(n, time.Duration(w)*time.Microsecond), evs)
		if m := maxInWindow(got, w); m > n {
			t.Fatalf("%d admitted within one window of %dµs, limit %d", m, w, n)
		}
		// Reference: keep every admitted request; admit when the ones
		// younger than w leave room.
		var ref []admitted
		for _, e := range evs {
			sum := int64(0)
			for _, a := range ref {
				if a.at > e.at-w {
					sum += a.cost
				}
			}
			if sum+e.cost <= n {
				ref = append(ref, admitted{e.at, e.cost})
			}
		}
		equalAdmissions(t, got, ref)
	})
}

func equalAdmissions(t *rapid.T, got, want []admitted) {
	if len(got) != len(want) {
		t.Fatalf("admitted %d requests, reference admits %d\n got %v\nwant %v", len(got), len(want), got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("admission %d: got %v, reference %v", i, got[i], want[i])
		}
	}
}

// refBucket is a token bucket in exact rational arithmetic.
func refBucket(evs []event, rate *big.Rat, burst int64) []admitted {
	tokens := new(big.Rat).SetInt64(burst)
	capacity := new(big.Rat).SetInt64(burst)
	last := int64(-1)
	var out []admitted
	for _, e := range evs {
		if last >= 0 && e.at > last {
			gain := new(big.Rat).Mul(rate, new(big.Rat).SetInt64(e.at-last))
			tokens.Add(tokens, gain)
			if tokens.Cmp(capacity) > 0 {
				tokens.Set(capacity)
			}
		}
		last = max(last, e.at)
		c := new(big.Rat).SetInt64(e.cost)
		if tokens.Cmp(c) >= 0 {
			tokens.Sub(tokens, c)
			out = append(out, admitted{e.at, e.cost})
		}
	}
	return out
}

func TestPropertyTokenBucketAndGCRA(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		count := rapid.Int64Range(1, 1000).Draw(t, "count")
		period := rapid.Int64Range(1, 3_000_000).Draw(t, "period")
		burst := rapid.Int64Range(1, 10).Draw(t, "burst")
		rate := Rate(count, period)
		tb := sluice.TokenBucket(rate, burst)
		gc := sluice.GCRA(rate, burst)
		evs := genTrace(t, period/count*2+1, burst, true)

		// GCRA decides exactly as the token bucket, decision by decision.
		ptb, pgc := mustCompile(t, tb), mustCompile(t, gc)
		var stb, sgc State
		for i, e := range evs {
			a := Step(&ptb, &stb, t0+e.at, e.cost, NoMaxDelay, 0, true)
			b := Step(&pgc, &sgc, t0+e.at, e.cost, NoMaxDelay, 0, true)
			if a != b {
				t.Fatalf("request %d at %d cost %d: token bucket %+v, gcra %+v", i, e.at, e.cost, a, b)
			}
		}

		// With a monotonic clock, both agree with a rational reference
		// bucket.
		evs = genTrace(t, period/count*2+1, burst, false)
		got := play(t, tb, evs)
		equalAdmissions(t, got, refBucket(evs, big.NewRat(count, period), burst))

		// At most burst + rate·t over any interval [a, b] of the trace.
		for i := range got {
			sum := int64(0)
			for j := i; j < len(got); j++ {
				if got[j].at < got[i].at {
					break
				}
				sum += got[j].cost
				bound := new(big.Rat).Mul(big.NewRat(count, period), new(big.Rat).SetInt64(got[j].at-got[i].at))
				bound.Add(bound, new(big.Rat).SetInt64(burst))
				if new(big.Rat).SetInt64(sum).Cmp(bound) > 0 {
					t.Fatalf("%d admitted in [%d, %d], bound %s", sum, got[i].at, got[j].at, bound.FloatString(3))
				}
			}
		}
	})
}

// TestPropertyBucketSaturated: requesting until refused at every
// microsecond admits exactly burst + ⌊rate·t⌋ over [0, t].
func TestPropertyBucketSaturated(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		count := rapid.Int64Range(1, 50).Draw(t, "count")
		period := rapid.Int64Range(1000, 100_000).Draw(t, "period")
		burst := rapid.Int64Range(2, 10).Draw(t, "burst")
		span := rapid.Int64Range(0, 50_000).Draw(t, "span")
		for _, l := range []sluice.Limit{sluice.TokenBucket(Rate(count, period), burst), sluice.GCRA(Rate(count, period), burst)} {
			p := mustCompile(t, l)
			var st State
			n := int64(0)
			for at := int64(0); at <= span; at++ {
				for Step(&p, &st, t0+at, 1, NoMaxDelay, 0, true).Allowed {
					n++
				}
			}
			if want := burst + span*count/period; n != want {
				t.Fatalf("%s over %dµs: admitted %d, want burst + ⌊rate·t⌋ = %d", l, span, n, want)
			}
		}
	})
}

func TestPropertyFixedWindow(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Int64Range(1, 20).Draw(t, "n")
		w := rapid.Int64Range(1, 1_000_000).Draw(t, "window")
		evs := genTrace(t, w/3+1, n, false)
		got := play(t, sluice.FixedWindow(n, time.Duration(w)*time.Microsecond), evs)
		if m := maxInWindow(got, w); m > 2*n {
			t.Fatalf("%d admitted within %dµs, more than 2N = %d", m, w, 2*n)
		}
		perWindow := map[int64]int64{}
		for _, a := range got {
			perWindow[(t0+a.at)/w] += a.cost
		}
		for k, c := range perWindow {
			if c > n {
				t.Fatalf("aligned window %d admitted %d, limit %d", k, c, n)
			}
		}
	})
}

func TestPropertySlidingWindow(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Int64Range(1, 30).Draw(t, "n")
		w := rapid.Int64Range(1, 1_000_000).Draw(t, "window")
		evs := genTrace(t, w/5+1, n, false)
		got := play(t, sluice.SlidingWindow(n, time.Duration(w)*time.Microsecond), evs)
		if m := maxInWindow(got, w); m > 2*n {
			t.Fatalf("%d admitted within %dµs, more than 2N", m, w)
		}
		// Reference: Cloudflare's estimate prev·(w-e)/w + cur, with the
		// weight in steps of 1/65536 and the weighted count rounded up.
		counts := map[int64]int64{} // aligned window index -> admitted cost
		var ref []admitted
		for _, e := range evs {
			k := (t0 + e.at) / w
			elapsed := (t0 + e.at) % w
			step := new(big.Rat).SetFrac64(elapsed*65536, w)
			stepUp := new(big.Int).Div(new(big.Int).Add(step.Num(), new(big.Int).Sub(step.Denom(), big.NewInt(1))), step.Denom())
			weighted := new(big.Rat).SetFrac64(counts[k-1]*(65536-stepUp.Int64()), 65536)
			weightedUp := new(big.Int).Div(new(big.Int).Add(weighted.Num(), new(big.Int).Sub(weighted.Denom(), big.NewInt(1))), weighted.Denom())
			if weightedUp.Int64()+counts[k]+e.cost <= n {
				counts[k] += e.cost
				ref = append(ref, admitted{e.at, e.cost})
			}
		}
		equalAdmissions(t, got, ref)
	})
}

func TestPropertyLeakyBucketSpacing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		count := rapid.Int64Range(1, 100).Draw(t, "count")
		period := rapid.Int64Range(1000, 2_000_000).Draw(t, "period")
		queue := rapid.Int64Range(0, 10).Draw(t, "queue")
		l := sluice.LeakyBucket(Rate(count, period), queue)
		p := mustCompile(t, l)
		// The caller's bound on the delay: none, or up to a little more
		// than the longest delay the queue gives.
		maxDelay := int64(NoMaxDelay)
		if rapid.Bool().Draw(t, "bounded") {
			maxDelay = rapid.Int64Range(0, (queue+1)*period/count+1).Draw(t, "maxDelay")
		}
		evs := genTrace(t, period/count+1, 1, false)
		// Reference shaper: each admitted request starts one interval after
		// the previous start, or now; it is admitted if it would start
		// within queue intervals and within maxDelay (in whole µs, rounded
		// up). A refusal lasts until both hold.
		interval := big.NewRat(period, count)
		longest := new(big.Rat).Mul(interval, new(big.Rat).SetInt64(queue))
		var lastStart *big.Rat
		var st State
		for i, e := range evs {
			now := new(big.Rat).SetInt64(e.at)
			start := new(big.Rat).Set(now)
			if lastStart != nil {
				if next := new(big.Rat).Add(lastStart, interval); next.Cmp(start) > 0 {
					start = next
				}
			}
			wait := new(big.Rat).Sub(start, now)
			waitUS := ceilRat(wait)
			fits := wait.Cmp(longest) <= 0
			soon := maxDelay < 0 || waitUS <= maxDelay
			d := Step(&p, &st, t0+e.at, 1, maxDelay, 0, true)
			if d.Allowed != (fits && soon) {
				t.Fatalf("request %d at %d: allowed %v, reference %v (wait %s, max delay %d)", i, e.at, d.Allowed, fits && soon, wait.FloatString(2), maxDelay)
			}
			if !d.Allowed {
				retry := max(0, ceilRat(new(big.Rat).Sub(wait, longest)))
				if !soon {
					retry = max(retry, waitUS-maxDelay)
				}
				if got := int64(d.RetryAfter / time.Microsecond); got != retry || d.Delay != 0 {
					t.Fatalf("request %d refused: retry %dµs delay %s, reference retry %dµs", i, got, d.Delay, retry)
				}
				continue
			}
			lastStart = start
			if got := int64(d.Delay / time.Microsecond); got != waitUS {
				t.Fatalf("request %d: delay %dµs, reference %dµs", i, got, waitUS)
			}
		}
	})
}

// ceilRat returns ⌈x⌉ for x ≥ 0.
func ceilRat(x *big.Rat) int64 {
	q := new(big.Int).Add(x.Num(), new(big.Int).Sub(x.Denom(), big.NewInt(1)))
	return q.Div(q, x.Denom()).Int64()
}

func TestPropertyWarmUpNeverFasterThanRate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		count := rapid.Int64Range(1, 100).Draw(t, "count")
		period := rapid.Int64Range(1000, 2_000_000).Draw(t, "period")
		warm := rapid.Int64Range(1, 10_000_000).Draw(t, "warmup")
		l := sluice.WarmUp(Rate(count, period), time.Duration(warm)*time.Microsecond)
		evs := genTrace(t, period/count*4+1, 1, false)
		got := play(t, l, evs)
		for i := 1; i < len(got); i++ {
			if gap := got[i].at - got[i-1].at; gap*count < period {
				t.Fatalf("admissions %d and %d are %dµs apart, faster than %d per %dµs", i-1, i, gap, count, period)
			}
		}
	})
}

func TestPropertyConcurrency(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Int64Range(1, 10).Draw(t, "n")
		ttl := rapid.Int64Range(1, 1_000_000).Draw(t, "ttl")
		p := mustCompile(t, sluice.Concurrency(n, time.Duration(ttl)*time.Microsecond))
		var st State
		type lease struct{ id, expiry, cost int64 }
		var held []lease // the reference: unexpired, unreleased leases
		now, id := int64(0), int64(0)
		for range rapid.IntRange(1, 200).Draw(t, "ops") {
			now += rapid.Int64Range(0, ttl/3+1).Draw(t, "gap")
			live := held[:0]
			for _, h := range held {
				if h.expiry > now {
					live = append(live, h)
				}
			}
			held = live
			inUse := int64(0)
			for _, h := range held {
				inUse += h.cost
			}
			if len(held) > 0 && rapid.Bool().Draw(t, "release") {
				i := rapid.IntRange(0, len(held)-1).Draw(t, "which")
				if !Release(&st, uint64(held[i].id)) {
					t.Fatalf("lease %d not held", held[i].id)
				}
				held = append(held[:i], held[i+1:]...)
				continue
			}
			c := rapid.Int64Range(1, n).Draw(t, "cost")
			id++
			d := Step(&p, &st, t0+now, c, NoMaxDelay, uint64(id), true)
			if want := inUse+c <= n; d.Allowed != want {
				t.Fatalf("acquire cost %d with %d in use of %d: allowed %v", c, inUse, n, d.Allowed)
			}
			if d.Allowed {
				held = append(held, lease{id, now + ttl, c})
			}
		}
	})
}

// Rate builds a sluice.Rate from a count per period in µs.
func Rate(count, periodUS int64) sluice.Rate {
	return sluice.Per(count, time.Duration(periodUS)*time.Microsecond)
}

func mustCompile(t *rapid.T, l sluice.Limit) Params {
	p, err := Compile(l)
	if err != nil {
		t.Fatalf("Compile(%s): %v", l, err)
	}
	return p
}

// TestPropertyClockBackwards: when the clock jumps back, each algorithm's
// guarantee still holds on the timeline of the latest time seen: going back
// never opens room that standing still would not have.
func TestPropertyClockBackwards(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Int64Range(1, 10).Draw(t, "n")
		w := rapid.Int64Range(1, 1_000_000).Draw(t, "period")
		d := time.Duration(w) * time.Microsecond
		l := rapid.SampledFrom([]sluice.Limit{
			sluice.FixedWindow(n, d), sluice.SlidingLog(n, d), sluice.SlidingWindow(n, d),
			sluice.TokenBucket(sluice.Per(n, d), n), sluice.GCRA(sluice.Per(n, d), n),
			sluice.LeakyBucket(sluice.Per(n, d), n-1),
		}).Draw(t, "limit")
		evs := genTrace(t, w/3+1, n, true)
		p := mustCompile(t, l)
		var st State
		var got []admitted // at the latest time seen
		latest := int64(0)
		for _, e := range evs {
			latest = max(latest, e.at)
			if Step(&p, &st, t0+e.at, e.cost, NoMaxDelay, 0, true).Allowed {
				got = append(got, admitted{latest, e.cost})
			}
		}
		switch l.Algorithm {
		case sluice.AlgorithmSlidingLog:
			if m := maxInWindow(got, w); m > n {
				t.Fatalf("%s: %d admitted in one window: %v (trace %v)", l, m, got, evs)
			}
		case sluice.AlgorithmFixedWindow, sluice.AlgorithmSlidingWindow:
			perWindow := map[int64]int64{}
			for _, a := range got {
				if perWindow[(t0+a.at)/w] += a.cost; perWindow[(t0+a.at)/w] > n {
					t.Fatalf("%s: more than %d in aligned window %d", l, n, (t0+a.at)/w)
				}
			}
		default:
			for i := range got {
				sum := int64(0)
				for j := i; j < len(got); j++ {
					sum += got[j].cost
					if (sum-n)*w > n*(got[j].at-got[i].at) {
						t.Fatalf("%s: %d admitted within %dµs", l, sum, got[j].at-got[i].at)
					}
				}
			}
		}
	})
}
