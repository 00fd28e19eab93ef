package algo

import (
	"testing"

	"github.com/sluicehq/sluice"
)

// TestDescriptionsComplete: every algorithm sluice implements has a whole
// description: a step, an idle time, a wire vector of known parameters
// without repeats, and its Lua step; an adjustable one (not Leases) has an
// adjustment, and only an algorithm with a bucket of its own has a bucket
// form. A new algorithm fails here until its row is complete.
func TestDescriptionsComplete(t *testing.T) {
	for _, a := range sluice.Algorithms() {
		d := Of(a)
		if d == nil {
			t.Errorf("%s: no description (internal/algo/desc.go)", a)
			continue
		}
		if d.idle == nil {
			t.Errorf("%s: idle missing", a)
		}
		stepsWithout(t, a) // step's switch has a case for it
		if d.Leases != (d.adjust == nil) {
			t.Errorf("%s: Leases %v but adjust set %v: an algorithm without leases is adjustable", a, d.Leases, d.adjust != nil)
		}
		if d.LuaFile == "" || d.LuaStep == "" {
			t.Errorf("%s: no Lua step", a)
		}
		if len(d.Wire) == 0 {
			t.Errorf("%s: empty wire vector", a)
		}
		seen := map[Wire]bool{}
		for _, w := range d.Wire {
			if w < WireN || w > WireTTL || seen[w] {
				t.Errorf("%s: wire parameter %d unknown or repeated", a, w)
			}
			seen[w] = true
		}
		if d.Bucket != noBucket && !seen[WireFull] {
			t.Errorf("%s: a bucket form without a bucket's parameters", a)
		}
	}
	for _, a := range sluice.Algorithms() {
		if a > 9 {
			t.Errorf("%s: code %d: the Lua port reads a limit argument's code as its first character (args.lua params)", a, a)
		}
	}
	if n := len(descs) - 1; n != len(sluice.Algorithms()) {
		t.Errorf("%d descriptions for %d algorithms", n, len(sluice.Algorithms()))
	}
}

// TestSameIsWire: Same compares exactly the wire vector (and a calendar):
// two limits whose vectors differ are not the same, and a limit written
// differently with the same vector is.
func TestSameIsWire(t *testing.T) {
	for _, a := range sluice.Algorithms() {
		l := sluice.Limit{Algorithm: a, Count: 10, Period: 2e9, Burst: 10, NoDelay: 1, Warmup: 4e9, LeaseTTL: 3e9}
		if Of(a).Bucket == noBucket && !Of(a).Shapes {
			l.Burst = 0
		}
		if !Of(a).Shapes {
			l.NoDelay = 0
		}
		if !Of(a).Paced {
			l.Warmup = 0
		}
		if !Of(a).Leases {
			l.LeaseTTL = 0
		} else {
			l.Period = 0
		}
		p, err := Compile(l)
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		for _, w := range Of(a).Wire {
			q := p
			switch w {
			case WireN:
				q.N++
			case WireP:
				q.P++
			case WireA:
				q.A++
			case WireB:
				q.B++
			case WireCap:
				q.Cap++
			case WireFull:
				q.Full++
			case WireNoDelay:
				q.NoDelay++
			case WireWarm:
				q.Warm++
			case WireTTL:
				q.TTL++
			}
			if p.Same(&q) {
				t.Errorf("%s: Same with %d changed", a, w)
			}
		}
		if q := p; !p.Same(&q) {
			t.Errorf("%s: not Same as itself", a)
		}
	}
}

// stepsWithout fails t if step has no case for a (it panics).
func stepsWithout(t *testing.T, a sluice.Algorithm) {
	t.Helper()
	defer func() {
		if v := recover(); v != nil {
			t.Errorf("%s: step: %v", a, v)
		}
	}()
	p := Params{Alg: a, N: 1, P: 1, A: 1, B: 1, Cap: 1, Full: 1, TTL: 1, Warm: 1}
	p.byA, p.byB = newDivisor(1), newDivisor(1)
	var s State
	Step(&p, &s, 1, 1, NoMaxDelay, 1, true)
}
