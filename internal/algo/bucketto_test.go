package algo

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"pgregory.net/rapid"
)

// drawExtreme draws from [lo, hi], one time in four an end of it.
func drawExtreme(t *rapid.T, lo, hi int64, label string) int64 {
	switch rapid.IntRange(0, 7).Draw(t, label+"-end") {
	case 0:
		return lo
	case 1:
		return hi
	}
	return rapid.Int64Range(lo, hi).Draw(t, label)
}

// drawBucketLimit draws a limit that BucketTo decides (token_bucket, gcra)
// or declines (leaky_bucket, fixed_window), from tiny to the largest
// Validate accepts.
func drawBucketLimit(t *rapid.T) sluice.Limit {
	n := drawExtreme(t, 1, 1<<36, "count")
	if rapid.Bool().Draw(t, "small count") {
		n = rapid.Int64Range(1, 20).Draw(t, "count")
	}
	per := time.Duration(drawExtreme(t, 1, int64(366*24*time.Hour/time.Microsecond), "period")) * time.Microsecond
	burst := drawExtreme(t, 1, 1<<36, "burst")
	if rapid.Bool().Draw(t, "small burst") {
		burst = rapid.Int64Range(1, 20).Draw(t, "burst")
	}
	l := rapid.SampledFrom([]sluice.Limit{
		sluice.TokenBucket(sluice.Per(n, per), burst), sluice.GCRA(sluice.Per(n, per), burst),
		sluice.TokenBucket(sluice.Per(n, per), burst), sluice.GCRA(sluice.Per(n, per), burst),
		sluice.LeakyBucket(sluice.Per(n, per), burst), sluice.FixedWindow(n, per),
	}).Draw(t, "limit")
	if l.Validate() != nil {
		t.Skip("parameters no Limit accepts (Validate): not a case")
	}
	return l
}

// TestBucketToIsStep: BucketTo decides as the general step does, to the
// bit, decision and state, over random limits, states (reached by random
// requests, adjustments into debt and refunds, and clocks that jump far
// forward and back), times, costs, MaxDelays, leases and commits,
// refusals included; and it declines the other algorithms and peeks,
// leaving the decision as it was.
func TestBucketToIsStep(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := drawBucketLimit(t)
		p := mustCompile(t, l)
		span := max(p.backstop, 1) * 4 // µs: well past a full refill, either way
		now := int64(t0)
		var st State
		for range rapid.IntRange(1, 60).Draw(t, "ops") {
			switch rapid.IntRange(0, 5).Draw(t, "jump") {
			case 0: // far, either way, to the ends of the time a store sees
				now = drawExtreme(t, t0-span, t0+span, "far")
			case 1:
				now += rapid.Int64Range(-span, span).Draw(t, "gap")
			default:
				now += rapid.Int64Range(-2, p.byA.ceil(p.B)*2).Draw(t, "small gap")
			}
			if rapid.IntRange(0, 5).Draw(t, "adjust") == 0 {
				m := l.MaxAdjust()
				Adjust(&p, &st, now, drawExtreme(t, -m, m, "delta"))
				continue
			}
			cost := drawExtreme(t, 0, p.Cap, "cost")
			maxDelay := drawExtreme(t, NoMaxDelay, span, "maxDelay")
			lease := rapid.Uint64().Draw(t, "lease")
			commit := rapid.IntRange(0, 3).Draw(t, "commit") > 0
			checkBucketTo(t, &p, st, now, cost, maxDelay, lease, commit)
			StepTo(&p, &st, now, cost, maxDelay, lease, commit, new(sluice.Decision))
		}
	})
}

// checkBucketTo compares StepTo (through BucketTo where it applies) with
// the general step from copies of st.
func checkBucketTo(t *rapid.T, p *Params, st State, now, cost, maxDelay int64, lease uint64, commit bool) {
	fast, general := st, st
	var got, want sluice.Decision
	StepTo(p, &fast, now, cost, maxDelay, lease, commit, &got)
	stepTo(p, &general, now, cost, maxDelay, lease, commit, &want)
	if got != want || fast.X != general.X || fast.Y != general.Y || fast.Idle != general.Idle || fast.Z != general.Z {
		t.Fatalf("alg %s now %d cost %d commit %v from %+v:\nfast    %+v state %+v\ngeneral %+v state %+v",
			p.Alg, now, cost, commit, st, got, fast, want, general)
	}
	canary := sluice.Decision{Lease: 7, Degraded: true}
	decided := BucketTo(p, &fast, now, cost, commit, &canary)
	if applies := cost > 0 && (p.Alg == sluice.AlgorithmTokenBucket || p.Alg == sluice.AlgorithmGCRA); decided != applies {
		t.Fatalf("BucketTo reported %v for %s cost %d", decided, p.Alg, cost)
	} else if !decided && canary != (sluice.Decision{Lease: 7, Degraded: true}) {
		t.Fatalf("BucketTo declined and wrote %+v", canary)
	}
}
