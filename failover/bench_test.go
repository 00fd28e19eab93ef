package failover_test

import (
	"context"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkTakeAnsweredAtOnce: what failover adds to a call its primary
// answers without waiting (a memstore here, as redisstore's near cache
// answers a known refusal): the breaker, the deadline, the warm fallback.
func BenchmarkTakeAnsweredAtOnce(b *testing.B) {
	s := overMemory(b, failover.Config{Mode: func(sluice.Request) failover.Mode { return failover.FailOpen }})
	r := sluice.Request{Key: "hot", Limit: sluice.FixedWindow(1, time.Hour), Cost: 1}
	ctx := context.Background()
	s.Take(ctx, r)
	b.ReportAllocs()
	for b.Loop() {
		if d, err := s.Take(ctx, r); err != nil || d.Allowed {
			b.Fatal(d, err)
		}
	}
}

// BenchmarkTakeParallel: what failover adds to calls its primary answers
// at once (a memstore), made from every core at once, each goroutine on a
// key of its own: the breaker sees every call.
func BenchmarkTakeParallel(b *testing.B) {
	s := overMemory(b, failover.Config{Mode: func(sluice.Request) failover.Mode { return failover.FailOpen }})
	var g atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := sluice.Request{Key: "k" + strconv.FormatInt(g.Add(1), 10), Limit: sluice.TokenBucket(sluice.PerSecond(1e9), 1e9), Cost: 1}
		for pb.Next() {
			if _, err := s.Take(context.Background(), r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTakeFallbackScaled: a call its primary answers at once under
// the fallback mode with a scaled fallback (an instance among two): the
// warm fallback is shown every request under its scaled limit.
func BenchmarkTakeFallbackScaled(b *testing.B) {
	s := overMemory(b, failover.Config{FallbackScale: 0.5, Logger: slog.New(slog.DiscardHandler)})
	r := sluice.Request{Key: "hot", Limit: sluice.TokenBucket(sluice.PerSecond(1_000_000_000), 1_000_000_000), Cost: 1}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Take(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTakeLeased is the gateway's store with quota leases on a hot
// key (failover in front of redisstore with leases, a warm memstore
// fallback), beside the memory store alone: what a request that its lease
// covers costs over one the memory store decides, and redisstore's own
// share of that (redisstore-leases, no failover). It starts a
// redis-server.
func BenchmarkTakeLeased(b *testing.B) {
	// A limit no run of the benchmark exhausts (b.Loop runs a second of
	// decisions, 16 million in memory): every request is admitted.
	hot := sluice.Request{Key: "hot", Limit: sluice.TokenBucket(sluice.PerSecond(1_000_000_000), 1_000_000_000), Cost: 1}
	b.Run("memory", func(b *testing.B) {
		m, err := memstore.New(memstore.Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		benchTake(b, m, hot)
	})
	server := redistest.StartProcess(b)
	leased := func(b *testing.B) *redisstore.Store {
		rs, err := redisstore.New(server.Client(clientOptions()), redisstore.Config{
			Leases: redisstore.LeaseConfig{Enabled: true}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { rs.Close() })
		return rs
	}
	b.Run("redisstore-leases", func(b *testing.B) {
		own := hot
		own.Key = "hot-redisstore" // its own state: the next run starts full
		benchTake(b, leased(b), own)
	})
	b.Run("leases", func(b *testing.B) {
		rs := leased(b)
		local, err := memstore.New(memstore.Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer local.Close()
		s, err := failover.New(rs, failover.Config{FallbackStore: local, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		benchTake(b, s, hot)
	})
}

func benchTake(b *testing.B, s sluice.Store, r sluice.Request) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}

// overMemory is failover over a memstore primary, under cfg, both closed
// when b ends.
func overMemory(b *testing.B, cfg failover.Config) *failover.Store {
	primary, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { primary.Close() })
	s, err := failover.New(primary, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}
