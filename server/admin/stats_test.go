package admin

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/server/keyview"
	"github.com/sluicehq/sluice/server/metrics"
)

func refusalOf(limit, key string) decide.Observation {
	return decide.Observation{Limit: limit, Key: key, Outcome: decide.Refused}
}

func asIs(key string) string { return key }

// TestHeavyKeys checks the Space-Saving guarantee the status page relies
// on: with 32 counters, a key refused more than 1/32 of all refusals is
// listed, its count never underestimated and overestimated by at most its
// error; and the sketch never holds more than 32 keys.
func TestHeavyKeys(t *testing.T) {
	s := NewStats(time.Second, time.Minute)
	total := 0
	for i := range 20_000 {
		key := fmt.Sprintf("k%d", i) // 20,000 keys refused once each...
		if i%10 == 0 {
			key = "hot" // ...and one refused 2,000 times, 1/11 of all
		}
		s.Add("gateway", refusalOf("per-ip", key))
		total++
	}
	rows, heavy := s.snapshot(asIs)
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

// TestStatsConcurrent adds from many goroutines while snapshots and
// history points are taken (run with -race); totals are exact.
func TestStatsConcurrent(t *testing.T) {
	s := NewStats(time.Second, time.Minute)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				s.Add("api", decide.Observation{Limit: fmt.Sprintf("limit-%d", i%3), Key: "k", Outcome: decide.Outcome(1 + g%8)})
				if i%100 == 0 {
					s.snapshot(asIs)
					s.hist.record(time.Now(), s.totals())
				}
			}
		})
	}
	wg.Wait()
	rows, _ := s.snapshot(asIs)
	var sum int64
	for _, r := range rows {
		for col, n := range r.Counts {
			if col != "without_store" {
				sum += n
			}
		}
	}
	if sum != 8000 {
		t.Errorf("counted %d decisions, want 8000", sum)
	}
}

// TestStatsWithoutStore: decisions the fallback made (admitted or refused)
// and those a failure mode admitted count as made without the store.
func TestStatsWithoutStore(t *testing.T) {
	s := NewStats(time.Second, time.Minute)
	s.Add("gateway", decide.Observation{Limit: "l", Outcome: decide.Admitted, Decision: sluice.Decision{Allowed: true, Degraded: true}})
	s.Add("gateway", decide.Observation{Limit: "l", Outcome: decide.Refused, Decision: sluice.Decision{Degraded: true}})
	s.Add("gateway", decide.Observation{Limit: "l", Outcome: decide.AdmittedUncounted})
	s.Add("gateway", decide.Observation{Limit: "l", Outcome: decide.Admitted, Decision: sluice.Decision{Allowed: true}})
	rows, _ := s.snapshot(asIs)
	if c := rows[0].Counts; c["without_store"] != 3 || c["admitted"] != 2 || c["refused"] != 1 || c["admitted_uncounted"] != 1 {
		t.Errorf("counts %v, want 3 without the store of 4", c)
	}
}

// TestHeavyKeysShown: heavy keys are shown as the names of the limit's
// key parts with their values masked, never the values clients sent
// (the same value gets the same mask), or as they are with show_keys.
func TestHeavyKeysShown(t *testing.T) {
	names := func(rule, limit string) ([]string, []string, bool) {
		if rule == "api" && limit == "per-token" {
			return []string{"ip", "header:X-Token"}, []string{"ip"}, true
		}
		return nil, nil, false
	}
	s := NewStats(time.Second, time.Minute)
	key := string(decide.AppendKey(nil, "api", "per-token", "203.0.113.7", "tok_live_SECRET"))
	for range 3 {
		s.Add("gateway", refusalOf("per-token", key))
	}
	masked := keyview.Shower{Names: names}
	_, heavy := s.snapshot(masked.Key)
	want := "ip=" + decide.MaskValue("203.0.113.7") + " header:X-Token=" + decide.MaskValue("tok_live_SECRET")
	if len(heavy) != 1 || heavy[0].Count != 3 || heavy[0].Key != want || heavy[0].Limit != "gateway per-token" {
		t.Fatalf("heavy keys %+v, want one key %q counted 3 times", heavy, want)
	}
	shown := keyview.Shower{Show: true, Names: names}
	for _, tc := range []struct{ key, want string }{
		{key, "ip=203.0.113.7 header:X-Token=tok_live_SECRET"},
		{string(decide.AppendKey(nil, "api", "per-token", "", "203.0.113.7")), "(on_missing) ip=203.0.113.7"},
		{string(decide.AppendKey(nil, "", "api", "user-42")), "key=user-42"},
		{string(decide.AppendKey(nil, "gone", "rule", "a", "b")), "part1=a part2=b"}, // a limit no longer in the policy
		{"not a key sluice built", "not a key sluice built"},
		{string(decide.AppendKey(nil, "", "rls", "generic_key=login/remote_address", "203.0.113.7")), "remote_address=203.0.113.7"},
		{string(decide.AppendKey(nil, "", "rls", "edge", "generic_key", "login", "remote_address", "203.0.113.7")), "generic_key=login remote_address=203.0.113.7"}, // the RLS's store key, in its refusal logs
		{string(decide.AppendKey(nil, "", "rls", "remote_address")), "(any value: the service reports values of detailed_metric limits only)"},
	} {
		if got := shown.Key(tc.key); got != tc.want {
			t.Errorf("shown %q as %q, want %q", tc.key, got, tc.want)
		}
	}
	if got := masked.Key("not a key sluice built"); got != decide.MaskValue("not a key sluice built") {
		t.Errorf("masked a foreign key as %q", got)
	}
}

// TestHistory: the history keeps what each limit decided in each step of
// its window, oldest first, and no more points than the window holds; a
// limit beyond maxCharted is counted, not charted.
func TestHistory(t *testing.T) {
	h := newHistory(time.Second, 3*time.Second) // 3 points
	t0 := time.Unix(1000, 0)
	a := statsKey{"gateway", "a"}
	tot := func(n int64) map[statsKey][nColumns]int64 { return map[statsKey][nColumns]int64{a: {n, 0, n / 2}} }
	for i, n := range []int64{4, 10, 10, 30} {
		h.record(t0.Add(time.Duration(i)*time.Second), tot(n))
	}
	d := h.doc()
	if len(d.Times) != 3 || d.Times[0] != t0.Add(time.Second).UnixMilli() || d.Times[2] != t0.Add(3*time.Second).UnixMilli() {
		t.Fatalf("times %v, want the last 3 seconds", d.Times)
	}
	if len(d.Series) != 1 || fmt.Sprint(d.Series[0].Points["admitted"]) != "[6 0 20]" || fmt.Sprint(d.Series[0].Points["refused"]) != "[3 0 10]" {
		t.Fatalf("series %+v, want admitted [6 0 20], refused [3 0 10]", d.Series)
	}
	if _, ok := d.Series[0].Points["delayed"]; ok {
		t.Errorf("a column with no decisions is sent: %+v", d.Series[0].Points)
	}
	many := map[statsKey][nColumns]int64{}
	for i := range maxCharted + 5 {
		many[statsKey{"api", fmt.Sprint(i)}] = [nColumns]int64{1}
	}
	h.record(t0.Add(4*time.Second), many)
	if d := h.doc(); len(d.Series) != maxCharted || d.NotCharted != 6 {
		t.Errorf("%d series charted, %d not, want %d and 6", len(d.Series), d.NotCharted, maxCharted)
	}
}

// BenchmarkObserve is what every decision costs the server's metrics and
// status page: a refusal with a key (the heavy keys' path) and an
// admission near the limit.
func BenchmarkObserve(b *testing.B) {
	m := metrics.New("bench")
	s := NewStats(time.Second, time.Minute)
	key := string(decide.AppendKey(nil, "everything", "per-ip", "203.0.113.7"))
	for _, o := range []decide.Observation{
		{Limit: "per-ip", Key: key, Outcome: decide.Refused, Decision: sluice.Decision{Limit: 5}},
		{Limit: "per-ip", Key: key, Outcome: decide.Admitted, Decision: sluice.Decision{Allowed: true, Limit: 5, Remaining: 0}},
	} {
		b.Run(o.Outcome.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m.Observe("gateway", o)
				s.Add("gateway", o)
			}
		})
	}
}

// TestStatsBound: the status page's counters hold at most maxTracked
// limits, whatever the decisions name, and count every decision of those
// held, from any number of goroutines.
func TestStatsBound(t *testing.T) {
	s := NewStats(time.Second, time.Minute)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range maxTracked + 100 {
				s.Add("api", decide.Observation{Limit: fmt.Sprint((i + g*997) % (maxTracked + 100)), Outcome: decide.Admitted})
			}
		})
	}
	wg.Wait()
	totals := s.totals()
	sum := int64(0)
	for _, v := range totals {
		sum += v[0]
	}
	if len(totals) != maxTracked || sum < 4*maxTracked {
		t.Fatalf("%d limits held, %d decisions counted; want %d limits, each counted 4 times", len(totals), sum, maxTracked)
	}
	for id, v := range totals {
		if v[0] != 4 {
			t.Fatalf("%v counted %d times, want 4", id, v[0])
		}
	}
	s.Add("api", decide.Observation{Limit: "new", Outcome: decide.Refused, Key: "k"})
	if _, ok := s.totals()[statsKey{"api", "new"}]; ok {
		t.Fatal("a limit past the bound was held")
	}
}

// BenchmarkStatsAddParallel is the status page's count of an admission
// from every core at once, as a server under load makes it.
func BenchmarkStatsAddParallel(b *testing.B) {
	s := NewStats(time.Second, time.Minute)
	o := decide.Observation{Limit: "per-ip", Outcome: decide.Admitted, Decision: sluice.Decision{Allowed: true, Limit: 5}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Add("rls", o)
		}
	})
}
