package metrics

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestStoreTimesAsPrometheus: sluice_store_duration_seconds shows what a
// prometheus histogram of the same buckets shows for the same calls, made
// from several goroutines: the same bucket counts and count, the same sum
// to the nanosecond; and no series before a store is instrumented.
func TestStoreTimesAsPrometheus(t *testing.T) {
	st := newStoreTimes()
	if got := collect(t, st); len(got) != 0 {
		t.Fatalf("%d series before a store is instrumented, want none", len(got))
	}
	st.used.Store(true)
	want := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "want", Buckets: storeBuckets[:]}, []string{"op"})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 5000 {
				op := r.IntN(len(storeOps))
				d := time.Duration(r.Int64N(int64(200 * time.Millisecond)))
				if r.IntN(4) == 0 { // a bound exactly
					d = time.Duration(storeBuckets[r.IntN(len(storeBuckets))] * float64(time.Second))
				}
				st.observe(op, d)
				want.WithLabelValues(storeOps[op]).Observe(d.Seconds())
			}
		})
	}
	wg.Wait()
	got, exp := collect(t, st), collect(t, want)
	if len(got) != len(storeOps) || len(exp) != len(storeOps) {
		t.Fatalf("%d series, want %d", len(got), len(storeOps))
	}
	for op, h := range exp {
		g := got[op]
		if g.GetSampleCount() != h.GetSampleCount() || math.Abs(g.GetSampleSum()-h.GetSampleSum()) > 1e-6 {
			t.Errorf("op %s: count %d, sum %v; want %d, %v", op, g.GetSampleCount(), g.GetSampleSum(), h.GetSampleCount(), h.GetSampleSum())
		}
		for i, b := range h.GetBucket() {
			if gb := g.GetBucket()[i]; gb.GetUpperBound() != b.GetUpperBound() || gb.GetCumulativeCount() != b.GetCumulativeCount() {
				t.Errorf("op %s: bucket le=%v: %d, want %d", op, gb.GetUpperBound(), gb.GetCumulativeCount(), b.GetCumulativeCount())
			}
		}
	}
}

// collect gathers c's histograms by their op label.
func collect(t *testing.T, c prometheus.Collector) map[string]*dto.Histogram {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.Histogram{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetHistogram()
		}
	}
	return out
}

// BenchmarkStoreTimeParallel is the store time every decision records,
// from both cores at once: in a prometheus histogram, and in storeTimes.
func BenchmarkStoreTimeParallel(b *testing.B) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Buckets: storeBuckets[:]})
	st := newStoreTimes()
	for _, c := range []struct {
		name    string
		observe func(time.Duration)
	}{{"prometheus", func(d time.Duration) { h.Observe(d.Seconds()) }}, {"sharded", func(d time.Duration) { st.observe(0, d) }}} {
		b.Run(c.name, func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c.observe(30 * time.Microsecond)
				}
			})
		})
	}
}
