package memstore

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestChangedLimitOutlivesOldWindow: a count carried over to a longer
// window is kept until that window ends, not swept when the old, shorter
// one would have ended (which would give the key a fresh quota).
func TestChangedLimitOutlivesOldWindow(t *testing.T) {
	clk := newClock() // on a whole minute
	s := newStore(t, Config{Now: clk.now, SweepInterval: -1})
	perMinute, perHour := sluice.FixedWindow(3, time.Minute), sluice.FixedWindow(3, time.Hour)
	for range 3 {
		if d, _ := s.Take(ctx, sluice.Request{Key: "k", Limit: perMinute, Cost: 1}); !d.Allowed {
			t.Fatal("refused within the quota")
		}
	}
	clk.advance(30 * time.Second)
	if d, _ := s.Take(ctx, sluice.Request{Key: "k", Limit: perHour, Cost: 1}); d.Allowed {
		t.Fatal("the raised window forgot the count")
	}
	clk.advance(45 * time.Second) // past the old minute
	s.sweep()
	s.sweep() // the second pass removes what the first found unused and fresh
	if d, _ := s.Take(ctx, sluice.Request{Key: "k", Limit: perHour, Cost: 1}); d.Allowed {
		t.Fatalf("admitted after a sweep: %+v", d)
	}
}
