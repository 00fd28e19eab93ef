package server

import (
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
)

// TestCensus: instances sharing a Redis and prefix count each other, and
// each fallback enforces 1/N; when one closes, the others soon enforce
// 1/(N-1); an instance under another prefix is not counted; while Redis is
// frozen, the last count stands.
func TestCensus(t *testing.T) {
	p := redistest.StartProcess(t)
	const interval = 50 * time.Millisecond
	start := func(prefix string) (*census, *failover.Store) {
		c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		mem, _ := memstore.New(memstore.Config{})
		fs, err := failover.New(mem, failover.Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fs.Close(); mem.Close() })
		return startCensus(c, prefix, fs, slog.New(slog.DiscardHandler), interval), fs
	}
	wait := func(what string, fs []*failover.Store, want float64) {
		t.Helper()
		deadline := time.Now().Add(200 * interval) // ample on a loaded machine
		for {
			ok := true
			for _, f := range fs {
				ok = ok && f.FallbackScale() == want
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: scales never all %v", what, want)
			}
			time.Sleep(interval / 5)
		}
	}
	c1, f1 := start("a:")
	c2, f2 := start("a:")
	c3, f3 := start("a:")
	c4, other := start("b:")
	defer c4.close()
	defer c1.close()
	defer c2.close()
	wait("three instances", []*failover.Store{f1, f2, f3}, 1.0/3)
	wait("one under another prefix", []*failover.Store{other}, 1)
	c3.close()
	wait("one closed", []*failover.Store{f1, f2}, 1.0/2)
	p.Freeze()
	time.Sleep(5 * interval)
	if f1.FallbackScale() != 0.5 {
		t.Errorf("with Redis frozen, the scale became %v; the last count should stand", f1.FallbackScale())
	}
	p.Thaw()
}
