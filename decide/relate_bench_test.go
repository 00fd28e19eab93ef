package decide_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// BenchmarkRunRelation measures what a relation adds to deciding one
// request (a reads check and a per-client check, writes busy, so both are
// charged): none (the reads check alone), a relation whose peek is reused
// (RelateFor's default, 100ms), and one peeked for every request; on
// memstore and on a Redis server on loopback.
func BenchmarkRunRelation(b *testing.B) {
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { mem.Close() })
	red, err := redisstore.New(redistest.Standalone(b), redisstore.Config{Prefix: redistest.Prefix(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { red.Close() })
	for _, st := range []struct {
		name  string
		store sluice.Store
	}{{"memstore", mem}, {"redis", red}} {
		for _, bc := range []struct {
			name      string
			relateFor time.Duration
			relation  bool
		}{{"none", 0, false}, {"reused", 0, true}, {"peeked", -1, true}} {
			b.Run(st.name+"/"+bc.name, func(b *testing.B) {
				lim := sluice.New(st.store)
				dc, err := decide.New(lim, decide.Config{RelateFor: bc.relateFor, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				reads, perClient, writes := relating(b.Name())
				reads.Limit = sluice.TokenBucket(sluice.PerSecond(1e9), 1e9)
				perClient.Limit = reads.Limit
				lim.Check(context.Background(), sluice.Request{Key: writes.Key, Limit: writes.Limit, Cost: 10})
				if !bc.relation {
					reads.When = nil
				}
				checks := []decide.Check{reads, perClient}
				var res decide.Result
				b.ReportAllocs()
				for b.Loop() {
					dc.Run(context.Background(), checks, &res)
					if res.Outcome != decide.Admitted || len(res.Enforced) != 2 {
						b.Fatalf("outcome %v, %d enforced", res.Outcome, len(res.Enforced))
					}
				}
			})
		}
	}
}
