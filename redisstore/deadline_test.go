package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestDeadlineBoundsEveryCaller: while a real server is killed (kill -9,
// the pool redialling) or frozen (SIGSTOP), every caller, whether its call
// ran alone, shared a worker's pipeline or waited for a check of several
// requests, returns by its context's deadline plus a small bound. The
// client's socket timeouts are a second, far above the deadline, so a
// caller that waits for a pipeline or a redial rather than its own deadline
// is seen.
func TestDeadlineBoundsEveryCaller(t *testing.T) {
	const (
		deadline = 50 * time.Millisecond
		callers  = 64
	)
	for _, fault := range []string{"kill", "freeze"} {
		t.Run(fault, func(t *testing.T) {
			p := redistest.StartProcess(t)
			c := p.Client(&redis.Options{
				DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
				ContextTimeoutEnabled: true, MaxRetries: -1,
			})
			s := newStore(t, c, redisstore.Config{})
			lim := sluice.GCRA(sluice.PerSecond(1_000_000), 1000)
			var (
				mu    sync.Mutex
				took  []time.Duration
				which string
				wg    sync.WaitGroup
				done  = make(chan struct{})
			)
			for i := range callers {
				wg.Go(func() {
					for {
						select {
						case <-done:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), deadline)
						start := time.Now()
						var err error
						op := "Take"
						if i%2 == 0 {
							_, err = s.Take(ctx, sluice.Request{Key: "one", Limit: lim, Cost: 1})
						} else {
							op = "TakeAll"
							ds := make([]sluice.Decision, 2)
							err = s.TakeAll(ctx, []sluice.Request{{Key: "a", Limit: lim, Cost: 1}, {Key: "b", Limit: lim, Cost: 1}}, ds)
						}
						d := time.Since(start)
						cancel()
						mu.Lock()
						if len(took) == 0 || d > slices.Max(took) {
							which = fmt.Sprintf("%s: %v", op, err)
						}
						took = append(took, d)
						mu.Unlock()
						time.Sleep(time.Millisecond)
					}
				})
			}
			late := redistest.Lateness(callers, deadline)
			time.Sleep(200 * time.Millisecond)
			if fault == "kill" {
				p.Kill()
			} else {
				p.Freeze()
			}
			time.Sleep(1500 * time.Millisecond)
			close(done)
			wg.Wait()
			if fault == "freeze" {
				p.Thaw()
			}
			// 20 ms for what the code does past the deadline, plus how late
			// the process's timers fired meanwhile, twice (on a loaded
			// 2-core machine under the race detector, tens of ms: callers
			// run more code than the timers' goroutines, and more often).
			// Before callers walked away from shared pipelines, the slowest
			// waited the socket timeout (a second) or a redial.
			noise := late()
			slices.Sort(took)
			slowest, p99 := took[len(took)-1], took[len(took)*99/100]
			t.Logf("%s: %d calls, p99 %v, slowest %v (deadline %v, timers late by up to %v), %s",
				fault, len(took), p99.Round(time.Millisecond), slowest.Round(time.Millisecond), deadline, noise.Round(time.Millisecond), which)
			if bound := deadline + 20*time.Millisecond + 2*noise; slowest > bound {
				t.Errorf("a caller waited %v, past %v (its deadline, 20 ms and twice the timers' lateness)", slowest, bound)
			}
		})
	}
}
