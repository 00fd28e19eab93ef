package memstore

import (
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// BenchmarkTake times one decision on a key the store holds, called on the
// store itself (no Limiter in between), with the sweeper off so that
// nothing but the decisions runs: 1 key, or 100,000 picked at random;
// serially, and from b.RunParallel. bench/ compares the store with other
// libraries; this one is for profiles and instruction counts of the store
// alone.
func BenchmarkTake(b *testing.B) {
	for _, n := range []int{1, 100_000} {
		for _, parallel := range []bool{false, true} {
			name := "keys=" + strconv.Itoa(n)
			if parallel {
				name += "/parallel"
			}
			b.Run(name, func(b *testing.B) { benchTake(b, n, parallel) })
		}
	}
}

func benchTake(b *testing.B, n int, parallel bool) {
	s := newStore(b, Config{MaxKeys: 1 << 18, SweepInterval: -1})
	lim := sluice.TokenBucket(sluice.PerSecond(1_000_000_000), 1_000_000_000)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(100_000+i)
		s.Take(ctx, sluice.Request{Key: strings.Clone(keys[i]), Limit: lim, Cost: 1})
	}
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	var seed atomic.Uint64
	loop := func(next func() bool) {
		x := 0x9e3779b97f4a7c15 * (seed.Add(1) | 1)
		for next() {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			d, _ := s.Take(ctx, sluice.Request{Key: keys[(x>>32)*uint64(n)>>32], Limit: lim, Cost: 1})
			if !d.Allowed {
				b.Error("refused")
				return
			}
		}
	}
	if parallel {
		b.RunParallel(func(pb *testing.PB) { loop(pb.Next) })
		return
	}
	i := 0
	loop(func() bool { i++; return i <= b.N })
}

// BenchmarkTakeNewKeys times a decision on a key the store has never
// seen, with its share of the sweeps, the load of a fallback store shown
// a spray of distinct keys: 20,000 new keys a second on a fake clock, a
// sweep every second (as Config.SweepInterval's default), each removing
// the keys back to fresh.
func BenchmarkTakeNewKeys(b *testing.B) {
	now := time.Unix(1_700_000_000, 0)
	s := newStore(b, Config{SweepInterval: -1, Now: func() time.Time { return now }})
	lim := sluice.TokenBucket(sluice.PerSecond(100), 100)
	key := make([]byte, 0, 32)
	take := func(i int) {
		key = strconv.AppendInt(append(key[:0], "rls:many:k_"...), int64(i), 10)
		if _, err := s.Take(ctx, sluice.Request{Key: string(key), Limit: lim, Cost: 1}); err != nil {
			b.Fatal(err)
		}
		now = now.Add(50 * time.Microsecond)
		if i%20_000 == 0 {
			s.sweep()
		}
	}
	for i := range 200_000 {
		take(-i - 1)
	}
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		take(i)
	}
}

// BenchmarkSweep times the sweeper per entry it examines, on a full store
// of keys that are fresh and unused since the previous pass (each is
// removed) or used since (each is kept): ns/op is per entry examined.
func BenchmarkSweep(b *testing.B) {
	for _, used := range []bool{false, true} {
		b.Run("used="+strconv.FormatBool(used), func(b *testing.B) { benchSweep(b, used) })
	}
}

func benchSweep(b *testing.B, used bool) {
	now := time.Unix(1_700_000_000, 0)
	s := newStore(b, Config{SweepInterval: -1, Now: func() time.Time { return now }})
	lim := sluice.TokenBucket(sluice.PerSecond(1000), 1)
	fill := func(base int) {
		for i := range 100_000 {
			k := "rls:many:k_" + strconv.Itoa(base+i)
			s.Take(ctx, sluice.Request{Key: k, Limit: lim, Cost: 1})
			if used { // a second decision marks it used
				s.Take(ctx, sluice.Request{Key: k, Limit: lim, Cost: 0})
			}
		}
		now = now.Add(time.Second)
	}
	fill(0)
	b.ReportAllocs()
	b.ResetTimer()
	seen := 0
	for i := 0; seen < b.N; i++ {
		b.StopTimer()
		if s.Len() < 50_000 {
			fill((i + 1) * 100_000)
		}
		b.StartTimer()
		s.sweep()
		seen += sweepBudget * len(s.shards)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(seen), "ns/entry")
}

// BenchmarkTakeKeyLength times one decision on one key of each length
// class: up to slotKey bytes (held in its slot as it is), and longer (a
// long IPv4 address, a policy's key of a rule, a limit and an address, and
// a 40-byte key: identified in the slot by two hashes of it).
func BenchmarkTakeKeyLength(b *testing.B) {
	for _, key := range []string{"user:100000", "203.113.255.255", "r0:l0:203.113.255.255", strings.Repeat("k", 40)} {
		b.Run("len="+strconv.Itoa(len(key)), func(b *testing.B) {
			s := newStore(b, Config{SweepInterval: -1})
			lim := sluice.TokenBucket(sluice.PerSecond(1_000_000_000), 1_000_000_000)
			s.Take(ctx, sluice.Request{Key: key, Limit: lim, Cost: 1})
			r := sluice.Request{Key: strings.Clone(key), Limit: lim, Cost: 1}
			b.ReportAllocs()
			for b.Loop() {
				if d, _ := s.Take(ctx, r); !d.Allowed {
					b.Fatal("refused")
				}
			}
		})
	}
}
