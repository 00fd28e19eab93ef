package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"pgregory.net/rapid"
)

// The conformance suite: the same generated traces (fixed timelines, random
// keys, random costs including peeks, composite checks, releases, every
// algorithm with random parameters) go to memstore and to redisstore, which
// must return identical decisions, step by step, also when several checks
// are merged into one batch script as under load. On the cluster, composite
// checks spanning slots take the charge-and-refund path and must still
// decide exactly as memstore does. Adjustments (Adjust, signed deltas
// into debt and back) are interleaved with the checks.

func TestConformanceStandalone(t *testing.T) {
	conformance(t, redistest.Standalone(t), false)
}

func TestConformanceCluster(t *testing.T) {
	conformance(t, redistest.Cluster(t), false)
}

// TestConformanceScripts: the same, the Lua sent as scripts (EVALSHA)
// instead of called as the function library.
func TestConformanceScripts(t *testing.T) {
	conformance(t, redistest.Standalone(t), true)
}

// fakeClock is shared by both stores of one trace.
type fakeClock struct{ us atomic.Int64 }

func (c *fakeClock) now() time.Time { return time.UnixMicro(c.us.Load()) }

func genLimit(t *rapid.T) sluice.Limit {
	return genLimitOf(t, rapid.IntRange(1, 8).Draw(t, "algorithm"))
}

// genLimitOf draws a limit of algorithm code alg (1 fixed_window … 8
// concurrency) with random parameters.
func genLimitOf(t *rapid.T, alg int) sluice.Limit {
	n := rapid.Int64Range(1, 8).Draw(t, "n")
	period := time.Duration(rapid.Int64Range(1, 3_000_000).Draw(t, "period_us")) * time.Microsecond
	switch alg {
	case 1:
		return sluice.FixedWindow(n, period)
	case 2:
		return sluice.SlidingLog(n, period)
	case 3:
		return sluice.SlidingWindow(n, period)
	case 4:
		return sluice.TokenBucket(sluice.Per(n, period), rapid.Int64Range(1, 8).Draw(t, "burst"))
	case 5:
		return sluice.GCRA(sluice.Per(n, period), rapid.Int64Range(1, 8).Draw(t, "burst"))
	case 6:
		q := rapid.Int64Range(0, 6).Draw(t, "queue")
		return sluice.LeakyBucket(sluice.Per(n, period), q).WithNoDelay(rapid.Int64Range(0, q).Draw(t, "nodelay"))
	case 7:
		return sluice.WarmUp(sluice.Per(n, period), time.Duration(rapid.Int64Range(1, 5_000_000).Draw(t, "warm_us"))*time.Microsecond)
	default:
		return sluice.Concurrency(n, period)
	}
}

// genMaxDelay draws a request's bound on its delay: none half the time,
// otherwise up to 3 s in ns (a bound below a µs included, which admits no
// delay at all).
func genMaxDelay(t *rapid.T) time.Duration {
	switch rapid.IntRange(0, 5).Draw(t, "max_delay_kind") {
	case 0, 1, 2:
		return 0
	case 3:
		return time.Duration(rapid.Int64Range(1, 2000).Draw(t, "max_delay_ns"))
	}
	return time.Duration(rapid.Int64Range(1, 3_000_000_000).Draw(t, "max_delay_ns"))
}

// traces says what a conformance trace is made of: its limits, its start
// and the gaps between its steps (µs; a quarter of one, backwards, now and
// then).
type traces struct {
	limit func(*rapid.T) sluice.Limit
	start func(*rapid.T) int64
	gap   func(*rapid.T) int64
	// limits, if set, draws the trace's three limits instead of limit.
	limits func(*rapid.T) []sluice.Limit
}

// plain traces: every algorithm, steps up to 1.5 s apart.
var plain = traces{
	limit: genLimit,
	start: func(t *rapid.T) int64 {
		return 1_700_000_040_000_000 + rapid.Int64Range(0, 10_000_000).Draw(t, "start")
	},
	gap: func(t *rapid.T) int64 { return rapid.Int64Range(0, 1_500_000).Draw(t, "gap_us") },
}

// changing traces: three limits of one algorithm, so that a key's limit
// changes from step to step and its state is carried over (sluice.Limit)
// by takes, checks, adjustments and releases alike.
var changing = traces{
	limits: func(t *rapid.T) []sluice.Limit {
		alg := rapid.IntRange(1, 8).Draw(t, "algorithm")
		return []sluice.Limit{genLimitOf(t, alg), genLimitOf(t, alg), genLimitOf(t, alg)}
	},
	start: plain.start,
	gap:   plain.gap,
}

// TestConformanceChanging: limits that change under a key's state, with
// adjustments (settles) interleaved, decide identically on both stores.
func TestConformanceChanging(t *testing.T) {
	conformanceOf(t, redistest.Standalone(t), false, changing)
}

func TestConformanceChangingCluster(t *testing.T) {
	conformanceOf(t, redistest.Cluster(t), true, changing)
}

func conformance(t *testing.T, client redis.UniversalClient, scripts bool) {
	conformanceOf(t, client, scripts, plain)
}

func conformanceOf(t *testing.T, client redis.UniversalClient, scripts bool, tr traces) {
	base := redistest.Prefix(t)
	var run atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		clk := &fakeClock{}
		clk.us.Store(tr.start(rt))
		mem, err := memstore.New(memstore.Config{Now: clk.now, SweepInterval: -1})
		if err != nil {
			rt.Fatal(err)
		}
		defer mem.Close()
		red, err := redisstore.New(client, redisstore.Config{
			Prefix: fmt.Sprintf("%s%d:", base, run.Add(1)), Now: clk.now, NearCache: -1, Scripts: scripts,
		})
		if err != nil {
			rt.Fatal(err)
		}
		defer red.Close()

		keys := []string{"global", "ip:203.0.113.7", "user:{42}:a}b"}
		var limits []sluice.Limit
		if tr.limits != nil {
			limits = tr.limits(rt)
		} else {
			limits = []sluice.Limit{tr.limit(rt), tr.limit(rt), tr.limit(rt)}
		}
		type lease struct {
			req      sluice.Request
			mem, red uint64
		}
		var leases []lease
		var history []string // the trace so far, printed when the stores disagree
		rt.Cleanup(func() {
			if rt.Failed() {
				for _, h := range history[max(0, len(history)-8):] {
					rt.Log(h)
				}
			}
		})
		ctx := context.Background()
		req := func(i int) sluice.Request {
			k := rapid.IntRange(0, len(keys)-1).Draw(rt, "key")
			l := limits[rapid.IntRange(0, len(limits)-1).Draw(rt, "limit")]
			r := sluice.Request{Key: keys[k], Limit: l, Cost: rapid.Int64Range(0, l.Capacity()).Draw(rt, "cost")}
			r.MaxDelay = genMaxDelay(rt)
			return r
		}
		// composite draws the 2 or 3 distinct requests of a check.
		composite := func() []sluice.Request {
			n := rapid.IntRange(2, 3).Draw(rt, "dims")
			rs := make([]sluice.Request, 0, n)
		pick:
			for len(rs) < n {
				r := req(len(rs))
				for _, o := range rs {
					if o.Key == r.Key && o.Limit.Shares(r.Limit) {
						continue pick
					}
				}
				rs = append(rs, r)
			}
			return rs
		}
		for step := range rapid.IntRange(1, 60).Draw(rt, "steps") {
			gap := tr.gap(rt)
			if rapid.IntRange(0, 15).Draw(rt, "backwards") == 0 {
				gap = -gap / 4
			}
			clk.us.Add(gap)
			at := clk.us.Load() - 1_700_000_040_000_000
			if rapid.IntRange(0, 4).Draw(rt, "adjust") == 0 {
				// settles: signed deltas on one key at one time, several
				// to reach the debt's bound and come back from it
				r := req(0)
				for range rapid.IntRange(1, 5).Draw(rt, "adjustments") {
					m := r.Limit.Capacity() // MaxAdjust but for concurrency, which refuses any
					if r.Limit.Algorithm != sluice.AlgorithmConcurrency {
						m = r.Limit.MaxAdjust()
					}
					r.Cost = rapid.Int64Range(-m, m).Draw(rt, "delta")
					dm, errM := mem.Adjust(ctx, r)
					dr, errR := red.Adjust(ctx, r)
					history = append(history, fmt.Sprintf("step %d at %dµs: adjust %q %s by %d -> %+v %v", step, at, r.Key, r.Limit, r.Cost, dm, errM))
					if (errM == nil) != (errR == nil) {
						rt.Fatalf("step %d adjust %s %v: memstore error %v, redisstore error %v", step, r.Key, r.Limit, errM, errR)
					}
					same(rt, step, r, dm, dr)
				}
				continue
			}
			switch op := rapid.IntRange(0, 11).Draw(rt, "op"); {
			case op < 6: // one request
				r := req(0)
				dm, errM := mem.Take(ctx, r)
				dr, errR := red.Take(ctx, r)
				history = append(history, fmt.Sprintf("step %d at %dµs: take %q %s cost %d max delay %s -> %+v", step, at, r.Key, r.Limit, r.Cost, r.MaxDelay, dm))
				if (errM == nil) != (errR == nil) {
					rt.Fatalf("step %d %s %v: memstore error %v, redisstore error %v", step, r.Key, r.Limit, errM, errR)
				}
				same(rt, step, r, dm, dr)
				if dm.Lease != 0 {
					leases = append(leases, lease{r, dm.Lease, dr.Lease})
				}
			case op < 9: // a composite check
				rs := composite()
				n := len(rs)
				dm, dr := make([]sluice.Decision, n), make([]sluice.Decision, n)
				if err := mem.TakeAll(ctx, rs, dm); err != nil {
					rt.Fatal(err)
				}
				if err := red.TakeAll(ctx, rs, dr); err != nil {
					rt.Fatal(err)
				}
				history = append(history, fmt.Sprintf("step %d at %dµs: check %v -> %+v", step, at, rs, dm))
				for i := range rs {
					same(rt, step, rs[i], dm[i], dr[i])
					if dm[i].Lease != 0 {
						leases = append(leases, lease{rs[i], dm[i].Lease, dr[i].Lease})
					}
				}
			case op > 9: // several checks at once, as the workers merge them under load
				m := rapid.IntRange(2, 6).Draw(rt, "batch")
				checks := make([][]sluice.Request, m)
				times := make([]int64, m)
				for i := range checks {
					// One clock for the batch: a batch script reads the
					// time once, and merges only calls of one clock.
					times[i] = clk.us.Load()
					checks[i] = []sluice.Request{req(0)}
					if rapid.Bool().Draw(rt, "batch_check") {
						if rs := composite(); redisstore.SameSlot(red, rs) {
							checks[i] = rs
						}
					}
				}
				dm := make([][]sluice.Decision, m)
				for i, rs := range checks {
					clk.us.Store(times[i])
					dm[i] = make([]sluice.Decision, len(rs))
					if err := mem.TakeAll(ctx, rs, dm[i]); err != nil {
						rt.Fatal(err)
					}
				}
				dr, err := redisstore.TakeBatch(red, checks, func(i int) { clk.us.Store(times[i]) })
				if err != nil {
					rt.Fatalf("step %d: batch of %d: %v", step, m, err)
				}
				for i, rs := range checks {
					history = append(history, fmt.Sprintf("step %d.%d at %dµs: batched check %v -> %+v", step, i, times[i]-1_700_000_040_000_000, rs, dm[i]))
					for j := range rs {
						same(rt, step, rs[j], dm[i][j], dr[i][j])
						if dm[i][j].Lease != 0 {
							leases = append(leases, lease{rs[j], dm[i][j].Lease, dr[i][j].Lease})
						}
					}
				}
			default: // op 9: release a lease
				if len(leases) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(leases)-1).Draw(rt, "lease")
				l := leases[i]
				leases = append(leases[:i], leases[i+1:]...)
				if err := mem.Release(ctx, l.req, l.mem); err != nil {
					rt.Fatal(err)
				}
				if err := red.Release(ctx, l.req, l.red); err != nil {
					rt.Fatal(err)
				}
			}
		}
	})
}

func same(t *rapid.T, step int, r sluice.Request, m, d sluice.Decision) {
	if (m.Lease == 0) != (d.Lease == 0) {
		t.Fatalf("step %d %q %s cost %d: lease memstore %d, redisstore %d", step, r.Key, r.Limit, r.Cost, m.Lease, d.Lease)
	}
	m.Lease, d.Lease = 0, 0
	if m != d {
		t.Fatalf("step %d %q %s cost %d:\n  memstore   %+v\n  redisstore %+v", step, r.Key, r.Limit, r.Cost, m, d)
	}
}
