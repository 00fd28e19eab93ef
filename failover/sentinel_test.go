package failover_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestChaosSentinelFailover: sluice on go-redis's Sentinel client
// (redis.NewFailoverClient), over a master, a replica and three Sentinels
// of the test's own (docs/operations.md "Sentinel"). The master is killed
// under load and the Sentinels promote the replica. Fallback mode: no
// caller sees an error, requests are decided by the fallback during the
// promotion and by Redis again soon after it, on the replica's copy of the
// state: a key charged before the kill (and replicated, WAIT) keeps every
// charge, so its limit holds exactly across the failover.
func TestChaosSentinelFailover(t *testing.T) {
	noLeaks(t, redialer)
	start := time.Now()
	master := redistest.StartProcess(t)
	replica := redistest.StartProcess(t, "--replicaof", "127.0.0.1", fmt.Sprint(master.Port))
	waitInfo(t, replica, "master_link_status:up", 10*time.Second)
	var sentinels []string
	for range 3 {
		s := redistest.StartSentinel(t, "sluice", master.Addr, 2, 500*time.Millisecond, 2*time.Second)
		sentinels = append(sentinels, s.Addr)
	}

	opts := roomyOptions()
	fc := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "sluice", SentinelAddrs: sentinels,
		DialTimeout: opts.DialTimeout, ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout,
		ContextTimeoutEnabled: true, MaxRetries: -1,
	})
	t.Cleanup(func() { fc.Close() })
	s, rec := stack(t, fc, failover.Config{
		Timeout: roomy, ProbeInterval: 300 * time.Millisecond, Mode: modeAll(failover.Fallback), FallbackScale: 0.5,
	})
	limiter := sluice.New(s)

	// 40 of 100 charged on the master, and on the replica before the kill.
	kept := sluice.GCRA(sluice.PerHour(1), 100)
	for i := range 40 {
		d, err := limiter.Allow(ctx, "kept", kept)
		if err != nil || !d.Allowed || d.Degraded {
			t.Fatalf("charge %d before the kill: %+v %v", i, d, err)
		}
	}
	if n, err := master.Client(nil).Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d %v", n, err)
	}

	var mu sync.Mutex
	i := 0
	stop := load(t, 8, 2*time.Millisecond, func() (sluice.Decision, error) {
		mu.Lock()
		i++
		key := fmt.Sprint("user:", i%32)
		mu.Unlock()
		return limiter.Allow(context.Background(), key, sluice.GCRA(sluice.PerSecond(1000), 100))
	})
	time.Sleep(300 * time.Millisecond)
	killed := time.Now()
	master.Kill()
	waitInfo(t, replica, "role:master", 20*time.Second)
	promoted := time.Now()
	time.Sleep(4500 * time.Millisecond)
	samples := stop()

	lastDegraded := fallbackSpan(t, samples, func(degraded int, last time.Time) {
		t.Logf("%d calls; replica promoted %v after the kill; %d degraded, the last %v after the kill; stats %+v; errors seen: %s; test took %v",
			len(samples), promoted.Sub(killed).Round(time.Millisecond), degraded, last.Sub(killed).Round(time.Millisecond),
			s.Stats(), rec.errors(), time.Since(start).Round(time.Millisecond))
	})
	// The Sentinels confirm the promotion (INFO, once a second during a
	// failover) and publish +switch-master; go-redis then dials the new
	// master, and the next probe (300 ms) closes the breaker. 4 s is
	// generous on a loaded machine (0.9 s seen on an idle one).
	if lastDegraded.After(promoted.Add(4 * time.Second)) {
		t.Errorf("degraded decisions went on %v after the promotion", lastDegraded.Sub(promoted))
	}
	waitState(t, s, failover.StateClosed, 10*time.Second)

	// The key charged before the kill: 60 left on the promoted replica,
	// then exactly those 60 admitted.
	d, err := s.Take(ctx, sluice.Request{Key: "kept", Limit: kept})
	if err != nil || d.Degraded || d.Remaining != 60 {
		t.Fatalf("after the failover, %q: %+v %v, want 60 remaining, decided by Redis", "kept", d, err)
	}
	admitted := 0
	for range 70 {
		d, err := limiter.Allow(ctx, "kept", kept)
		if err != nil || d.Degraded {
			t.Fatalf("after the failover: %+v %v", d, err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 60 {
		t.Fatalf("after the failover %d of 70 admitted, want the 60 left of 100", admitted)
	}
}

// waitInfo polls p's INFO until it contains line, for at most limit.
func waitInfo(t *testing.T, p *redistest.Process, line string, limit time.Duration) {
	t.Helper()
	c := p.Client(&redis.Options{MaxRetries: -1})
	deadline := time.Now().Add(limit)
	for {
		info, err := c.Info(ctx).Result()
		if err == nil && strings.Contains(info, line) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q in INFO after %v (%v)", p, line, limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
