package main

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// outageProbe pings rp every 5 ms with the instances' 50 ms deadline, from
// a client set as sluice serve sets its own, until stop, which returns the
// longest Redis failed such calls in a row as this machine delivered them:
// from the start of a failed ping after a success to the end of the last
// failed one before the next success. Five failures in
// a row, each of a call made after the one before had failed, take at
// least five deadlines (250 ms) of failing: a breaker that opens while the
// probe saw a shorter outage counted failures of one moment more than once.
// Its pool is large enough that go-redis never stops dialling for a second
// after failed dials (which it does once they reach the pool's size), so
// the probe measures Redis, not its own backoff.
func outageProbe(rp *redistest.Process) (stop func() time.Duration) {
	c := rp.Client(&redis.Options{
		DialTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond,
		ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, PoolSize: 1000,
	})
	done, result := make(chan struct{}), make(chan time.Duration)
	go func() {
		var first, last time.Time // of the failures since the last success
		var longest time.Duration
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				result <- max(longest, last.Sub(first))
				return
			case <-tick.C:
			}
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			err := c.Ping(ctx).Err()
			cancel()
			switch {
			case err != nil && first.IsZero():
				first, last = start, time.Now()
			case err != nil:
				last = time.Now()
			case !first.IsZero():
				longest = max(longest, last.Sub(first))
				first, last = time.Time{}, time.Time{}
			}
		}
	}()
	return sync.OnceValue(func() time.Duration {
		close(done)
		return <-result
	})
}

// TestServeStall: three sluice serve processes with the default failure
// settings on one Redis count each other (each enforces 1/3 of a limit
// while Redis cannot decide), and a SIGSTOP of Redis for 100 ms (which
// opens no breaker) or for a second (which does) under 600 requests a
// second through their gateways admits within the limit's bound plus 5%.
// (The 2,000 requests a second of failover's TestChaosStall would, through
// three race-built processes and their HTTP, measure this machine.)
func TestServeStall(t *testing.T) {
	if testing.Short() {
		t.Skip("a chaos test of several seconds")
	}
	for _, stall := range []time.Duration{100 * time.Millisecond, time.Second} {
		t.Run(stall.String(), func(t *testing.T) { serveStall(t, stall) })
	}
}

func serveStall(t *testing.T, stall time.Duration) {
	rp := redistest.StartProcess(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, `
rules:
  - name: all
    match: {path: /}
    limits:
      - {name: cap, key: global, algorithm: token_bucket, rate: 100/s, burst: 100}
`)
	prefix := redistest.Prefix(t)
	var procs []*proc
	for range 3 {
		procs = append(procs, start(t, nil, "--store", "redis", "--redis-addrs", rp.Addr, "--policy", policy, "--redis-prefix", prefix))
	}
	for _, p := range procs {
		p.waitLog(`"instances":3`, 10*time.Second)
	}
	type result struct {
		took time.Duration
		ok   bool
	}
	var (
		mu      sync.Mutex
		results []result
		wg      sync.WaitGroup
	)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
	outage := outageProbe(rp)
	const rate, total = 600, 5 * time.Second
	t0 := time.Now()
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for sent := 0; time.Since(t0) < total; <-tick.C {
			for due := int(time.Since(t0).Seconds() * rate); sent < due; sent++ {
				url := procs[sent%3].url("gateway", "/")
				wg.Go(func() {
					start := time.Now()
					resp, err := client.Get(url)
					r := result{took: time.Since(start)}
					if err == nil {
						r.ok = resp.StatusCode == 200
						resp.Body.Close()
					}
					mu.Lock()
					results = append(results, r)
					mu.Unlock()
				})
			}
		}
	})
	time.Sleep(1500 * time.Millisecond)
	rp.Freeze()
	time.Sleep(stall)
	rp.Thaw()
	wg.Wait()
	elapsed := time.Since(t0)
	out := outage()
	admitted := 0
	var took []time.Duration
	for _, r := range results {
		if r.ok {
			admitted++
		}
		took = append(took, r.took)
	}
	slices.Sort(took)
	bound := 100 + 100*elapsed.Seconds()
	t.Logf("%d requests in %v, %d admitted (bound %.0f, %+.1f%%); latency p99 %v, slowest %v; Redis failed a direct client's pings for up to %v in a row",
		len(results), elapsed.Round(time.Millisecond), admitted, bound, 100*(float64(admitted)/bound-1),
		took[len(took)*99/100].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), out.Round(time.Millisecond))
	// The limit's bound plus 5%, also on a saturated machine (race-built
	// processes at load 10 and more: p99 of a second and more), where the
	// instances' breakers close up to a probe interval apart or a probe
	// fails, and the first instance back on Redis spends the tokens that
	// accrued meanwhile: what the others' fallbacks admitted is charged to
	// Redis past the limit, into debt (sluice.Adjuster), and the requests
	// after it pay it back. When it was charged only as far as the limit
	// had room, up to +18.5% was measured; before fallback was the
	// default, this test admitted twice the bound.
	limit := 1.05 * bound
	if float64(admitted) > limit {
		for i, p := range procs {
			for _, line := range strings.Split(p.logs(), "\n") {
				if strings.Contains(line, "charged") || strings.Contains(line, "instances") || strings.Contains(line, "breaker") {
					t.Logf("instance %d: %s", i, line)
				}
			}
		}
		t.Errorf("admitted %d, more than %.0f (the bound %.0f)", admitted, limit, bound)
	}
	// A 1 s stall opens every breaker; a 100 ms one none, while the
	// machine keeps up: HTTP p99 within 100 ms (on a saturated machine,
	// calls to a healthy Redis miss the 50 ms deadline too), and Redis
	// failed the probe's pings for less than the 250 ms that five counted
	// failures take (at load, a thawed Redis and the connections redialled
	// after the stall's timeouts can take longer to answer than the stall
	// lasted). Either way the breaker's reason is logged.
	kept := took[len(took)*99/100] <= 100*time.Millisecond && out < 250*time.Millisecond
	for i, p := range procs {
		opened := contains(p.logs(), "circuit breaker opened")
		if stall < time.Second && opened {
			for _, line := range strings.Split(p.logs(), "\n") {
				if strings.Contains(line, "circuit breaker opened") {
					t.Logf("instance %d: %s", i, line)
				}
			}
		}
		if stall >= time.Second && !opened || stall < time.Second && opened && kept {
			t.Errorf("a %v stall: an instance's breaker opened: %v", stall, opened)
		}
	}
}
