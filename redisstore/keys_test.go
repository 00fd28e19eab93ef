package redisstore

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// fuzzLimit builds a limit from fuzzed fields.
func fuzzLimit(alg uint8, count, periodUS, burst, noDelay, warmupUS, leaseUS int64) sluice.Limit {
	return sluice.Limit{
		Algorithm: sluice.Algorithm(alg % 10),
		Count:     count,
		Period:    time.Duration(periodUS) * time.Microsecond,
		Burst:     burst,
		NoDelay:   noDelay,
		Warmup:    time.Duration(warmupUS) * time.Microsecond,
		LeaseTTL:  time.Duration(leaseUS) * time.Microsecond,
	}
}

// FuzzStateKeys: two different (key, limit) pairs never share a Redis key,
// with or without a slot key, whatever bytes the keys hold; a pair's state
// and log keys differ and live on one Cluster slot.
func FuzzStateKeys(f *testing.F) {
	f.Add("a:b", "c", uint8(1), int64(10), int64(1e6), int64(0), int64(0), int64(0), int64(0),
		"a", "b:c", uint8(1), int64(10), int64(1e6), int64(0), int64(0), int64(0), int64(0))
	f.Add("1:a}", "x", uint8(4), int64(1), int64(1e6), int64(5), int64(0), int64(0), int64(0),
		"1:a", "}x", uint8(4), int64(1), int64(1e6), int64(5), int64(0), int64(0), int64(0))
	f.Add("k/1", "", uint8(1), int64(1), int64(1), int64(0), int64(0), int64(0), int64(0),
		"k", "", uint8(1), int64(11), int64(1), int64(0), int64(0), int64(0), int64(0))
	f.Add("k", "", uint8(8), int64(1), int64(1), int64(0), int64(0), int64(0), int64(2),
		"k", "", uint8(8), int64(1), int64(1), int64(0), int64(0), int64(0), int64(20))
	f.Fuzz(func(t *testing.T,
		k1, slot1 string, alg1 uint8, c1, p1, b1, n1, w1, l1 int64,
		k2, slot2 string, alg2 uint8, c2, p2, b2, n2, w2, l2 int64) {
		lim1 := fuzzLimit(alg1, c1, p1, b1, n1, w1, l1)
		lim2 := fuzzLimit(alg2, c2, p2, b2, n2, w2, l2)
		if lim1.Validate() != nil || lim2.Validate() != nil {
			return // the store refuses these before it builds a key
		}
		// A slot key function that returns a value derived from each key:
		// the fuzzer picks it through the slot strings.
		slotOf := map[string]string{k1: slot1}
		if _, ok := slotOf[k2]; !ok {
			slotOf[k2] = slot2
		}
		for _, s := range []*Store{
			{prefix: "sluice:"},
			{prefix: "s:", slotKey: func(k string) string { return slotOf[k] }},
		} {
			s1, log1 := s.stateKeys(k1, lim1)
			s2, log2 := s.stateKeys(k2, lim2)
			same := k1 == k2 && lim1.Shares(lim2)
			if (s1 == s2) != same || (log1 == log2) != same {
				t.Fatalf("(%q, %v) and (%q, %v): keys %q, %q and %q, %q", k1, lim1, k2, lim2, s1, log1, s2, log2)
			}
			if s1 == log1 || s1 == log2 || s2 == log1 {
				t.Fatalf("a state key equals a log key: %q %q %q %q", s1, log1, s2, log2)
			}
			if slot(s1) != slot(log1) || !strings.HasPrefix(s1, s.prefix) {
				t.Fatalf("%q and %q: slots %d and %d", s1, log1, slot(s1), slot(log1))
			}
		}
	})
}
