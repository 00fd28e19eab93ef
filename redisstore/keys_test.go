package redisstore

import (
	"cmp"
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

// FuzzStateKeys: two different (key, slot, limit) triples never share a
// Redis key, with or without Config.Slots, whatever bytes the keys and
// slots hold; a triple's state and log keys differ and live on one Cluster
// slot. Without Slots the slot is ignored, and with it an empty slot is
// the key itself.
func FuzzStateKeys(f *testing.F) {
	f.Add("a:b", "c", uint8(1), int64(10), int64(1e6), int64(0), int64(0), int64(0), int64(0),
		"a", "b:c", uint8(1), int64(10), int64(1e6), int64(0), int64(0), int64(0), int64(0))
	f.Add("1:a}", "x", uint8(4), int64(1), int64(1e6), int64(5), int64(0), int64(0), int64(0),
		"1:a", "}x", uint8(4), int64(1), int64(1e6), int64(5), int64(0), int64(0), int64(0))
	f.Add("k/1", "", uint8(1), int64(1), int64(1), int64(0), int64(0), int64(0), int64(0),
		"k", "", uint8(1), int64(11), int64(1), int64(0), int64(0), int64(0), int64(0))
	f.Add("k", "", uint8(8), int64(1), int64(1), int64(0), int64(0), int64(0), int64(2),
		"k", "", uint8(8), int64(1), int64(1), int64(0), int64(0), int64(0), int64(20))
	f.Add("k", "k", uint8(1), int64(1), int64(1), int64(0), int64(0), int64(0), int64(0),
		"k", "", uint8(1), int64(1), int64(1), int64(0), int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T,
		k1, slot1 string, alg1 uint8, c1, p1, b1, n1, w1, l1 int64,
		k2, slot2 string, alg2 uint8, c2, p2, b2, n2, w2, l2 int64) {
		r1 := sluice.Request{Key: k1, Slot: slot1, Limit: fuzzLimit(alg1, c1, p1, b1, n1, w1, l1)}
		r2 := sluice.Request{Key: k2, Slot: slot2, Limit: fuzzLimit(alg2, c2, p2, b2, n2, w2, l2)}
		if r1.Limit.Validate() != nil || r2.Limit.Validate() != nil {
			return // the store refuses these before it builds a key
		}
		for _, s := range []*Store{{prefix: "sluice:"}, {prefix: "s:", slots: true}} {
			s1, log1 := s.stateKeys(&r1)
			s2, log2 := s.stateKeys(&r2)
			same := k1 == k2 && r1.Limit.Shares(r2.Limit)
			if s.slots {
				same = same && cmp.Or(slot1, k1) == cmp.Or(slot2, k2)
			}
			if (s1 == s2) != same || (log1 == log2) != same {
				t.Fatalf("%+v and %+v: keys %q, %q and %q, %q", r1, r2, s1, log1, s2, log2)
			}
			if s1 == log1 || s1 == log2 || s2 == log1 {
				t.Fatalf("a state key equals a log key: %q %q %q %q", s1, log1, s2, log2)
			}
			if slot(s1) != slot(log1) || !strings.HasPrefix(s1, s.prefix) {
				t.Fatalf("%q and %q: slots %d and %d", s1, log1, slot(s1), slot(log1))
			}
			if s.slots && cmp.Or(slot1, k1) == cmp.Or(slot2, k2) && slot(s1) != slot(s2) {
				t.Fatalf("%+v and %+v share a slot but hash to %d and %d", r1, r2, slot(s1), slot(s2))
			}
		}
	})
}
