package metrics

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
)

// TestInstrumentCountsEachOperation: every store operation is timed and
// its errors counted under its own op label.
func TestInstrumentCountsEachOperation(t *testing.T) {
	m := New("test")
	ms, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ms.Close() // every call now fails with sluice.ErrClosed
	s := m.Instrument(ms)
	ctx, l := context.Background(), sluice.FixedWindow(1, time.Second)
	r := sluice.Request{Key: "k", Limit: l, Cost: 1}
	_, takeErr := s.Take(ctx, r)
	_, adjustErr := s.(sluice.Adjuster).Adjust(ctx, r)
	failed := map[string]error{
		"take":     takeErr,
		"take_all": s.TakeAll(ctx, []sluice.Request{r}, make([]sluice.Decision, 1)),
		"release":  s.Release(ctx, sluice.Request{Key: "k", Limit: l}, 1),
		"adjust":   adjustErr,
	}
	if !errors.Is(takeErr, sluice.ErrClosed) {
		t.Fatalf("Take: %v, want ErrClosed", takeErr)
	}
	errs, times := series(t, m, "sluice_store_errors_total"), series(t, m, "sluice_store_duration_seconds")
	for _, op := range []string{"take", "take_all", "release", "adjust"} {
		want := 0.0
		if failed[op] != nil {
			want = 1
		}
		if errs[op] != want || times[op] != 1 {
			t.Errorf("op %q: %v errors in %v timed calls, want %v in 1 (%v)", op, errs[op], times[op], want, failed[op])
		}
	}
}

// TestWatchFailoverModes: the degraded counter has a series per failure
// mode.
func TestWatchFailoverModes(t *testing.T) {
	m := New("test")
	ms, _ := memstore.New(memstore.Config{})
	fs, err := failover.New(ms, failover.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m.WatchFailover(fs)
	got := series(t, m, "sluice_failover_degraded_total")
	if len(got) != 3 || got["open"] != 0 || got["closed"] != 0 || got["fallback"] != 0 {
		t.Fatalf("sluice_failover_degraded_total: %v, want a zero for open, closed and fallback", got)
	}
}

// series returns the series of the family name by their one label's
// value: a counter's value, a histogram's count of samples.
func series(t *testing.T, m *Metrics, name string) map[string]float64 {
	t.Helper()
	mfs, err := m.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			v := s.GetCounter().GetValue() + float64(s.GetHistogram().GetSampleCount())
			got[s.GetLabel()[0].GetValue()] = v
		}
	}
	return got
}
