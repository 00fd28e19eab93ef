package failover

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// TestScaledOncePerLimit: a limit is scaled (and validated) once per
// scale: the second request under it reads what the first computed, the
// same limit sluice.Limit.Scale gives (or the limit itself where the
// scaled one is not valid); the limits remembered are bounded, and one
// past the bound is still scaled right.
func TestScaledOncePerLimit(t *testing.T) {
	limits := []sluice.Limit{
		sluice.TokenBucket(sluice.PerSecond(100), 20),
		sluice.FixedWindow(10, time.Minute),
		sluice.LeakyBucket(sluice.PerSecond(2), 5).WithNoDelay(5),
		sluice.Concurrency(4, time.Minute),
		{}, // not valid: kept as it is
	}
	c := &scaled{f: 0.5}
	for _, l := range limits {
		want, err := l.Scale(0.5)
		if err != nil {
			want = l
		}
		for range 3 {
			if got := c.limit(l); got != want {
				t.Fatalf("%v scaled: %v, want %v", l, got, want)
			}
		}
	}
	if n := len(*c.seen.Load()); n != len(limits) {
		t.Fatalf("%d limits remembered after %d distinct ones: want each once", n, len(limits))
	}
	for i := range int64(maxScaled + 10) {
		l := sluice.FixedWindow(1000+i, time.Minute)
		if got := c.limit(l); got.Count != (1000+i+1)/2 {
			t.Fatalf("%v scaled: %v", l, got)
		}
	}
	if n := len(*c.seen.Load()); n != maxScaled {
		t.Fatalf("%d limits remembered: want the bound, %d", n, maxScaled)
	}
}

// TestSetFallbackScaleFresh: a new scale starts with no limit scaled under
// the old one.
func TestSetFallbackScaleFresh(t *testing.T) {
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	s, err := New(mem, Config{FallbackScale: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := sluice.FixedWindow(100, time.Minute)
	if got := s.fallbackRequest(sluice.Request{Limit: l}).Limit.Count; got != 50 {
		t.Fatalf("under 0.5: count %d, want 50", got)
	}
	if err := s.SetFallbackScale(0.25); err != nil {
		t.Fatal(err)
	}
	if got := s.fallbackRequest(sluice.Request{Limit: l}).Limit.Count; got != 25 {
		t.Fatalf("under 0.25: count %d, want 25", got)
	}
}

// BenchmarkScaledLimit: a limit scaled on every call, and read back as
// the fallback reads it.
func BenchmarkScaledLimit(b *testing.B) {
	l := sluice.TokenBucket(sluice.PerSecond(1_000_000_000), 1_000_000_000)
	b.Run("scale", func(b *testing.B) {
		for b.Loop() {
			if _, err := l.Scale(0.5); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("remembered", func(b *testing.B) {
		c := &scaled{f: 0.5}
		for b.Loop() {
			c.limit(l)
		}
	})
}
