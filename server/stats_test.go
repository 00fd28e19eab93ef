package server

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/decide"
)

// TestHeavyKeys checks the Space-Saving guarantee the status page relies
// on: with 32 counters, a key refused more than 1/32 of all refusals is
// listed, its count never underestimated and overestimated by at most its
// error; and the sketch never holds more than 32 keys.
func TestHeavyKeys(t *testing.T) {
	s := newStats(true)
	total := 0
	for i := range 20_000 {
		key := fmt.Sprintf("k%d", i) // 20,000 keys refused once each...
		if i%10 == 0 {
			key = "hot" // ...and one refused 2,000 times, 1/11 of all
		}
		s.add("gateway", "per-ip", "refused", key)
		total++
	}
	rows, heavy := s.snapshot()
	if len(heavy) > 32 {
		t.Fatalf("%d heavy keys, more than the 32 counters", len(heavy))
	}
	if len(rows) != 1 || rows[0].Counts["refused"] != int64(total) {
		t.Errorf("rows %+v, want one with %d refused", rows, total)
	}
	found := false
	for _, h := range heavy {
		if h.Key == "hot" {
			found = true
			if h.Count < 2000 || h.Count-h.Error > 2000 {
				t.Errorf("hot counted %d ± %d, true count 2000", h.Count, h.Error)
			}
		}
	}
	if !found || heavy[0].Key != "hot" {
		t.Errorf("the hot key is not first: %+v", heavy[:3])
	}
}

// TestStatsConcurrent adds from many goroutines while snapshots are taken
// (run with -race); totals are exact.
func TestStatsConcurrent(t *testing.T) {
	s := newStats(true)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				s.add("api", fmt.Sprintf("limit-%d", i%3), outcomes[g%len(outcomes)], "k")
				if i%100 == 0 {
					s.snapshot()
				}
			}
		})
	}
	wg.Wait()
	rows, _ := s.snapshot()
	var sum int64
	for _, r := range rows {
		for _, n := range r.Counts {
			sum += n
		}
	}
	if sum != 8000 {
		t.Errorf("counted %d decisions, want 8000", sum)
	}
}

func TestPrintable(t *testing.T) {
	got := printable("10:everything6:per-ip\x00\x07" + strings.Repeat("x", 300))
	if !strings.HasPrefix(got, `10:everything6:per-ip|\x7`) || len(got) > maxShownKey+8 {
		t.Errorf("printable = %q", got)
	}
}

// TestHeavyKeysMasked: by default the heavy keys hold masks, never the key
// values clients sent; the same key gets the same mask.
func TestHeavyKeysMasked(t *testing.T) {
	s := newStats(false)
	key := string(decide.AppendKey(nil, "api", "per-token", "tok_live_SECRET"))
	for range 3 {
		s.add("gateway", "per-token", "refused", key)
	}
	_, heavy := s.snapshot()
	if len(heavy) != 1 || heavy[0].Count != 3 || heavy[0].Key != decide.MaskKey(key) || heavy[0].Limit != "gateway per-token" {
		t.Fatalf("heavy keys %+v, want one masked key counted 3 times", heavy)
	}
	if strings.Contains(heavy[0].Key, "SECRET") {
		t.Fatalf("heavy key %q shows the value", heavy[0].Key)
	}
	s = newStats(true)
	s.add("gateway", "per-token", "refused", key)
	if _, heavy := s.snapshot(); heavy[0].Key != "api / per-token / tok_live_SECRET" {
		t.Errorf("shown key %q", heavy[0].Key)
	}
}
