package algo

import (
	"testing"

	"github.com/sluicehq/sluice"
	"pgregory.net/rapid"
)

// TestClosedIsBucketTo: after any decision, at the time it was decided at,
// the word Closed returns says what BucketTo answers a request of cost 1
// at every later time: refused, with RefuseClosed's decision to the bit,
// before W; admitted from W on (and at once when the word is 0). States
// are reached as in TestBucketToIsStep (random requests, adjustments into
// debt and refunds) but on a clock that never goes back: memstore
// publishes the word only with its own, monotonic, clock.
func TestClosedIsBucketTo(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := drawBucketLimit(t)
		p := mustCompile(t, l)
		span := max(p.backstop, 1) * 4
		now := int64(t0)
		var st State
		for range rapid.IntRange(1, 40).Draw(t, "ops") {
			switch rapid.IntRange(0, 5).Draw(t, "jump") {
			case 0:
				now += drawExtreme(t, 0, span, "far")
			case 1:
				now += rapid.Int64Range(0, span).Draw(t, "gap")
			default:
				now += rapid.Int64Range(0, p.byA.ceil(p.B)*2).Draw(t, "small gap")
			}
			if rapid.IntRange(0, 5).Draw(t, "adjust") == 0 {
				m := l.MaxAdjust()
				Adjust(&p, &st, now, drawExtreme(t, -m, m, "delta"))
			} else {
				StepTo(&p, &st, now, drawExtreme(t, 0, p.Cap, "cost"), NoMaxDelay, 0, true, new(sluice.Decision))
			}
			checkClosed(t, &p, st, now)
		}
	})
}

// checkClosed checks Closed's word for st, decided at now, against
// BucketTo at times from now on (around W, far past it, random ones) and a
// little before now.
func checkClosed(t *rapid.T, p *Params, st State, now int64) {
	w := Closed(p, &st, now)
	if p.Alg != sluice.AlgorithmTokenBucket && p.Alg != sluice.AlgorithmGCRA {
		if w != 0 {
			t.Fatalf("Closed is %d for %s, want 0", w, p.Alg)
		}
		return
	}
	if w < 0 || (w != 0 && w>>1 <= now) {
		t.Fatalf("Closed %d at %d: not a word for a later time", w, now)
	}
	ats := []int64{now, now + 1, now + rapid.Int64Range(0, 4*max(p.backstop, 1)).Draw(t, "later")}
	if w != 0 {
		until := w >> 1
		ats = append(ats, until-1, until, until+1, until+rapid.Int64Range(0, 4*max(p.backstop, 1)).Draw(t, "past"))
	}
	if w != 0 && 2*p.Full < 1<<53 { // the clock gone back a little (a word of 0 refuses nothing then either)
		back := min(p.backstop, 2000)
		ats = append(ats, now-1, now-rapid.Int64Range(0, back).Draw(t, "back"))
	}
	for _, at := range ats {
		copied := st
		var want sluice.Decision
		BucketTo(p, &copied, at, 1, false, &want)
		got := sluice.Decision{Lease: 9, Degraded: true}
		refused := w != 0 && RefuseClosed(p, w, at, &got)
		if refused == want.Allowed {
			t.Fatalf("%s state %+v decided at %d, word %d (until %d): at %d RefuseClosed says refused %v, BucketTo %+v",
				p.Alg, st, now, w, w>>1, at, refused, want)
		}
		if refused && got != want {
			t.Fatalf("%s state %+v, word %d, at %d:\nRefuseClosed %+v\nBucketTo     %+v", p.Alg, st, w, at, got, want)
		}
		if !refused && got != (sluice.Decision{Lease: 9, Degraded: true}) {
			t.Fatalf("RefuseClosed admitted and wrote %+v", got)
		}
	}
}
