package shed

import (
	"math"
	"testing"
	"time"
)

const ms = time.Millisecond

// step is one sample fed to an algorithm and the limit it must return,
// worked out by hand in the comments.
type step struct {
	s    Sample
	want float64
}

func run(t *testing.T, a Algorithm, limit float64, steps []step) {
	t.Helper()
	for i, st := range steps {
		got := a.Update(limit, st.s)
		if math.Abs(got-st.want) > 1e-9 {
			t.Fatalf("step %d: Update(%v, %+v) = %.6f, want %.6f", i+1, limit, st.s, got, st.want)
		}
		limit = got
	}
}

func TestGradient2Steps(t *testing.T) {
	run(t, &Gradient2{}, 20, []step{
		// long = 10ms; gradient = min(1, 1.5×10/10) = 1; next = 20+4;
		// 20×0.8 + 24×0.2 = 20.8.
		{Sample{RTT: 10 * ms, InFlight: 20}, 20.8},
		// long = mean(10, 20) = 15ms; gradient = min(1, 1.5×15/20) = 1;
		// next = 24.8; 20.8×0.8 + 24.8×0.2 = 21.6.
		{Sample{RTT: 20 * ms, InFlight: 20}, 21.6},
		// long = mean(10, 20, 40) = 23.33ms; gradient = 1.5×23.33/40 =
		// 0.875; next = 21.6×0.875 + 4 = 22.9; 21.6×0.8 + 22.9×0.2 = 21.86.
		{Sample{RTT: 40 * ms, InFlight: 21}, 21.86},
		// 5 in flight, under half of 21.86: the limit stays (long = 42.5ms).
		{Sample{RTT: 100 * ms, InFlight: 5}, 21.86},
		// long = 42.5 + (400-42.5)/5 = 114ms; 1.5×114/400 = 0.4275, held at
		// 0.5; next = 10.93 + 4 = 14.93; 21.86×0.8 + 14.93×0.2 = 20.474.
		{Sample{RTT: 400 * ms, InFlight: 30}, 20.474},
	})
}

func TestGradient2LongAverage(t *testing.T) {
	g := &Gradient2{LongWindow: 600}
	for range 10 { // the warm-up: a plain mean of 100ms
		g.Update(20, Sample{RTT: 100 * ms})
	}
	if g.long != float64(100*ms) {
		t.Fatalf("long after warm-up = %v, want 100ms", time.Duration(g.long))
	}
	// The 11th sample moves long by 2/601 of the way to it: 100 - 90×2/601
	// = 99.7005ms; that is more than twice 10ms, so it decays by 5% to
	// 94.7155ms. The gradient is held at 1: next = 24, 20×0.8 + 24×0.2.
	if got := g.Update(20, Sample{RTT: 10 * ms, InFlight: 20}); math.Abs(got-20.8) > 1e-9 {
		t.Fatalf("limit = %v, want 20.8", got)
	}
	want := (100 - 90*2.0/601) * 0.95 * float64(ms)
	if math.Abs(g.long-want) > 1 {
		t.Fatalf("long = %v, want %v", time.Duration(g.long), time.Duration(want))
	}
}

func TestVegasSteps(t *testing.T) {
	run(t, &Vegas{}, 20, []step{
		// The first sample is the no-load latency: 10ms; the limit stays.
		{Sample{RTT: 10 * ms, InFlight: 20}, 20},
		// log = max(1, floor(log10 20)) = 1; queue = ceil(20×(1-10/10)) = 0
		// ≤ 1: grow by 6×1.
		{Sample{RTT: 10 * ms, InFlight: 20}, 26},
		// queue = ceil(26×(1-10/20)) = 13 > 6: shrink by 1.
		{Sample{RTT: 20 * ms, InFlight: 26}, 25},
		// queue = ceil(25×(1-10/12)) = ceil(4.17) = 5, within 3..6: keep.
		{Sample{RTT: 12 * ms, InFlight: 25}, 25},
		// queue = ceil(25×(0.5/10.5)) = ceil(1.19) = 2 < 3: grow by 1.
		{Sample{RTT: 10*ms + 500*time.Microsecond, InFlight: 25}, 26},
		// A drop shrinks by 1 whatever the latency.
		{Sample{RTT: 10 * ms, InFlight: 26, Dropped: true}, 25},
		// 12 in flight, under half of 25: keep.
		{Sample{RTT: 50 * ms, InFlight: 12}, 25},
	})
	// log10 150 = 2.18: log = 2; queue 0 ≤ 2: grow by 12.
	v := &Vegas{}
	v.Update(150, Sample{RTT: 10 * ms})
	if got := v.Update(150, Sample{RTT: 10 * ms, InFlight: 150}); got != 162 {
		t.Fatalf("limit 150, no queue: %v, want 162", got)
	}
}

func TestVegasProbe(t *testing.T) {
	// ProbeEvery 1 at limit 4: every 4th sample takes the baseline afresh.
	v := &Vegas{ProbeEvery: 1}
	for _, rtt := range []time.Duration{10 * ms, 30 * ms, 30 * ms} {
		v.Update(4, Sample{RTT: rtt, InFlight: 4})
	}
	if v.noLoad != float64(10*ms) {
		t.Fatalf("noLoad = %v, want 10ms", time.Duration(v.noLoad))
	}
	if got := v.Update(4, Sample{RTT: 50 * ms, InFlight: 4}); got != 4 || v.noLoad != float64(50*ms) {
		t.Fatalf("probe: limit %v, noLoad %v; want 4, 50ms", got, time.Duration(v.noLoad))
	}
}

func TestAlgorithmsIgnoreEmptySamples(t *testing.T) {
	for _, a := range []Algorithm{&Gradient2{}, &Vegas{}} {
		if got := a.Update(20, Sample{}); got != 20 {
			t.Errorf("%s: a sample without latency moved the limit to %v", a.Name(), got)
		}
	}
}

func TestBBRSteps(t *testing.T) {
	w := func(completed int, rtt time.Duration) Sample {
		return Sample{RTT: rtt, InFlight: 1, Completed: completed, Elapsed: 100 * ms}
	}
	run(t, &BBR{Window: 3, RTTWindow: 3}, 20, []step{
		{w(10, 50*ms), 5},         // 100/s × 50ms
		{w(30, 80*ms), 15},        // max 300/s × min 50ms
		{w(20, 40*ms), 12},        // 300/s × 40ms
		{w(10, 100*ms), 12},       // the first sample leaves: 300/s × 40ms still
		{w(10, 100*ms), 8},        // the 300/s leaves: 200/s × 40ms
		{Sample{RTT: 10 * ms}, 8}, // nothing completed: no change
	})
}

func TestBBRWindows(t *testing.T) {
	// The latency's window outlasts the throughput's: after the 300/s
	// sample leaves, the 20ms latency is still the minimum.
	b := &BBR{Window: 2, RTTWindow: 4}
	w := func(completed int, rtt time.Duration) Sample {
		return Sample{RTT: rtt, Completed: completed, Elapsed: 100 * ms}
	}
	run(t, b, 20, []step{
		{w(30, 20*ms), 6},  // 300/s × 20ms
		{w(10, 90*ms), 6},  // 300/s × 20ms
		{w(20, 90*ms), 4},  // max(100, 200)/s × 20ms
		{w(20, 90*ms), 4},  // 200/s × 20ms
		{w(20, 90*ms), 18}, // the 20ms sample leaves: 200/s × 90ms
	})
}
