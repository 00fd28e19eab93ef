package failover_test

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// replies counts, on every node client of a ClusterClient (so before
// go-redis follows them), the redirections and retry replies Redis sent.
type replies struct {
	moved, ask, tryAgain, crossSlot, asking, evalsha atomic.Int64
	// tryAgainMerged counts the TRYAGAIN replies to scripts naming several
	// keys: batch scripts merging several checks, which the store sends
	// again one by one. tryAgain counts the others, which are bugs.
	tryAgainMerged atomic.Int64
}

func (r *replies) note(cmd redis.Cmder) {
	switch cmd.Name() {
	case "asking":
		r.asking.Add(1)
	case "evalsha":
		r.evalsha.Add(1)
	}
	if err := cmd.Err(); err != nil {
		msg := err.Error()
		switch {
		case strings.HasPrefix(msg, "MOVED "):
			r.moved.Add(1)
		case strings.HasPrefix(msg, "ASK "):
			r.ask.Add(1)
		case strings.HasPrefix(msg, "TRYAGAIN") && len(cmd.Args()) > 2 && fmt.Sprint(cmd.Args()[2]) != "1":
			r.tryAgainMerged.Add(1)
		case strings.HasPrefix(msg, "TRYAGAIN"):
			r.tryAgain.Add(1)
		case strings.HasPrefix(msg, "CROSSSLOT"):
			r.crossSlot.Add(1)
		}
	}
}

func (r *replies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *replies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.note(cmd)
		return err
	}
}

func (r *replies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			r.note(c)
		}
		return err
	}
}

func (r *replies) String() string {
	return fmt.Sprintf("%d EVALSHA, %d MOVED, %d ASK (%d ASKING sent), %d TRYAGAIN to single-key scripts and %d to merged batches, %d CROSSSLOT",
		r.evalsha.Load(), r.moved.Load(), r.ask.Load(), r.asking.Load(), r.tryAgain.Load(), r.tryAgainMerged.Load(), r.crossSlot.Load())
}

// errorStats sums INFO errorstats over nodes: what the servers themselves
// answered with an error, by error code.
func errorStats(t *testing.T, nodes []*redistest.Process) map[string]int64 {
	t.Helper()
	sum := map[string]int64{}
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		info, err := c.Info(ctx, "errorstats").Result()
		c.Close()
		if err != nil {
			t.Fatalf("INFO errorstats on %s: %v", n.Addr, err)
		}
		for l := range strings.SplitSeq(info, "\n") {
			// errorstat_MOVED:count=12
			name, count, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(l, "errorstat_")), ":count=")
			if !ok || !strings.HasPrefix(l, "errorstat_") {
				continue
			}
			v, _ := strconv.ParseInt(count, 10, 64)
			sum[name] += v
		}
	}
	return sum
}

// do runs one command on the server at addr and fails t on error.
func do(t *testing.T, addr string, args ...any) any {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	v, err := c.Do(ctx, args...).Result()
	if err != nil {
		t.Fatalf("%s: %v: %v", addr, args, err)
	}
	return v
}

// reshardCluster starts a private 3-master cluster and returns its nodes,
// their addresses and ids, and a cluster client whose every node client
// counts the replies it sees.
func reshardCluster(t *testing.T) ([]*redistest.Process, []string, map[string]string, *redis.ClusterClient, *replies) {
	nodes, addrs := startCluster(t, 0)
	ids := map[string]string{} // addr → node id
	for _, n := range nodes {
		ids[n.Addr] = do(t, n.Addr, "CLUSTER", "MYID").(string)
		do(t, n.Addr, "CONFIG", "RESETSTAT")
	}
	opts := roomyOptions()
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs, DialTimeout: opts.DialTimeout, ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout,
		ContextTimeoutEnabled: true, MaxRetries: -1,
	})
	seen := &replies{}
	cc.OnNewNode(func(c *redis.Client) { c.AddHook(seen) })
	t.Cleanup(func() { cc.Close() })
	return nodes, addrs, ids, cc, seen
}

// slotOf returns key's slot and the address of the master serving it.
func slotOf(t *testing.T, cc *redis.ClusterClient, key string) (int64, string) {
	t.Helper()
	slot, err := cc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range slots {
		if int64(r.Start) <= slot && slot <= int64(r.End) {
			return slot, r.Nodes[0].Addr
		}
	}
	t.Fatalf("slot %d: no master in CLUSTER SLOTS %v", slot, slots)
	return 0, ""
}

// TestReshard: slots move between the masters of a live Redis Cluster
// while requests run through failover (FailClosed, so a failure is an
// error) on keys over many slots and on one hot key: first redis-cli
// --cluster reshard moves 200 slots, keys included, under the background
// load; then the hot key's slot is moved by hand, step by step as redis-cli
// does, with hot requests at every step.
//
// What holds, and is asserted: go-redis follows MOVED and ASK, in
// pipelines too, so no request fails with them; the hot key's requests
// before and after its slot's migration never fail; and its token bucket
// (burst B, one token an hour) admits exactly B across the migration: its
// state moves with its slot, neither lost nor charged twice.
//
// While a slot is open (between CLUSTER SETSLOT MIGRATING/IMPORTING and
// SETSLOT NODE) requests of its keys must not fail either: Redis refuses a
// script that names a key missing from a migrating slot with TRYAGAIN, so
// redisstore names only keys that exist together (the state key twice for
// algorithms without a log). The breaker is set never to open, so that each
// request's outcome is its own, and any error or degraded decision fails
// the test.
func TestReshard(t *testing.T) {
	noLeaks(t, redialer)
	start := time.Now()
	nodes, addrs, ids, cc, seen := reshardCluster(t)
	prefix := redistest.Prefix(t)
	// No near cache: every request of the hot key, refused ones too, runs
	// a script on the cluster.
	rs, err := redisstore.New(cc, redisstore.Config{Prefix: prefix, NearCache: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	rec := &errRecorder{Store: rs}
	s := newStore(t, rec, failover.Config{
		Timeout: roomy, ConsecutiveFailures: -1, FailureRatio: -1, Mode: modeAll(failover.FailClosed),
	})
	limiter := sluice.New(s)

	// Background load on 2048 keys, over the slots of every master.
	spread := sluice.GCRA(sluice.PerSecond(1_000_000), 1_000_000)
	var next atomic.Int64
	stop := load(t, 6, time.Millisecond, func() (sluice.Decision, error) {
		return limiter.Allow(context.Background(), fmt.Sprint("user:", next.Add(1)%2048), spread)
	})

	// The hot key: B tokens, one more an hour. hot sends n requests of it
	// at once, from as many goroutines, so that they share pipelines with
	// each other and with the background load, and tallies each outcome by
	// phase.
	const B = 100
	hotLimit := sluice.TokenBucket(sluice.PerHour(1), B)
	type tally struct{ admitted, refused int }
	var (
		hotMu      sync.Mutex
		hotAdmit   int
		phases     []string
		byPhase    = map[string]*tally{}
		unexpected []string
	)
	hot := func(phase string, n int) {
		hotMu.Lock()
		if byPhase[phase] == nil {
			phases = append(phases, phase)
			byPhase[phase] = &tally{}
		}
		hotMu.Unlock()
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				d, err := limiter.Allow(context.Background(), "hot", hotLimit)
				hotMu.Lock()
				defer hotMu.Unlock()
				tl := byPhase[phase]
				switch {
				case err != nil || d.Degraded:
					unexpected = append(unexpected, fmt.Sprintf("%s: %+v, %v", phase, d, err))
				case d.Allowed:
					tl.admitted++
					hotAdmit++
				default:
					tl.refused++
				}
			})
		}
		wg.Wait()
	}
	hot("before", 20)

	// The hot key's slot, its master (the source) and the two others.
	var hotKey string
	for _, k := range redistest.Keys(t, cc, prefix) {
		if strings.Contains(k, "{3:hot}") {
			hotKey = k
		}
	}
	if hotKey == "" {
		t.Fatalf("no key of the hot limit under %q", prefix)
	}
	slot, source := slotOf(t, cc, hotKey)
	var target, third string
	for _, a := range addrs {
		switch {
		case a == source:
		case target == "":
			target = a
		default:
			third = a
		}
	}
	if third == "" {
		t.Fatalf("slot %d: source %q, target %q, third %q", slot, source, target, third)
	}

	// 1. redis-cli moves 200 slots, and the keys in them, from the third
	// master to the target, under the background load.
	const moved = 200
	reshardStart := time.Now()
	out, err := exec.Command("redis-cli", "--cluster", "reshard", source,
		"--cluster-from", ids[third], "--cluster-to", ids[target],
		"--cluster-slots", fmt.Sprint(moved), "--cluster-yes").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster reshard: %v\n%s", err, out)
	}
	reshardTook := time.Since(reshardStart)
	hot("after redis-cli reshard", 10)

	// 2. The hot key's slot, moved by hand from source to target.
	do(t, target, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source])
	do(t, source, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target])
	hot("slot open, keys on the source", 20)
	keys := do(t, source, "CLUSTER", "GETKEYSINSLOT", slot, 1000).([]any)
	host, port, _ := strings.Cut(target, ":")
	do(t, source, append([]any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}, keys...)...)
	hot("slot open, keys on the target", 20) // the source answers ASK
	for _, a := range []string{target, source, third} {
		do(t, a, "CLUSTER", "SETSLOT", slot, "NODE", ids[target])
	}
	hot("moved", 20) // the client's slot map is stale: MOVED
	for range 10 {   // then until the bucket is surely empty
		hot("drain", 10)
	}
	samples := stop()

	var report strings.Builder
	for _, p := range phases {
		tl := byPhase[p]
		fmt.Fprintf(&report, "%s: %d admitted, %d refused; ", p, tl.admitted, tl.refused)
	}
	for _, x := range samples {
		switch {
		case x.err != nil || x.d.Degraded || !x.d.Allowed:
			unexpected = append(unexpected, fmt.Sprintf("background: %+v, %v", x.d, x.err))
		}
	}
	t.Logf("%d background requests; redis-cli moved %d slots in %v; slot %d (%d keys) moved by hand; hot key: %s",
		len(samples), moved, reshardTook.Round(time.Millisecond), slot, len(keys), report.String())
	t.Logf("the client saw %s; the servers answered errors %v; errors returned: %s; test took %v",
		seen, errorStats(t, nodes), rec.errors(), time.Since(start).Round(time.Millisecond))
	for i, u := range unexpected {
		if i == 5 {
			t.Errorf("... %d unexpected outcomes in all", len(unexpected))
			break
		}
		t.Errorf("unexpected outcome: %s", u)
	}
	if hotAdmit != B {
		t.Errorf("the hot key admitted %d across the migration, want exactly its burst %d", hotAdmit, B)
	}
	if seen.moved.Load() == 0 || seen.ask.Load() == 0 {
		t.Errorf("the client saw %s: want MOVED and ASK exercised", seen)
	}
	if seen.tryAgain.Load() != 0 {
		t.Errorf("the client saw %s: a single-key script was refused with TRYAGAIN", seen)
	}
	if seen.crossSlot.Load() != 0 {
		t.Errorf("the client saw %s: a script named keys of two slots", seen)
	}
}

// TestReshardMergedBatches: distinct keys of one slot (one Slot, with
// Config.Slots, gives them one hash tag) are merged into batch scripts under load. While their
// slot migrates with half of its keys moved, Redis refuses a script naming
// keys on both sides with TRYAGAIN; the store must then decide each merged
// check alone (the moved keys by ASK), so that no request fails.
func TestReshardMergedBatches(t *testing.T) {
	noLeaks(t, redialer)
	_, addrs, ids, cc, seen := reshardCluster(t)
	prefix := redistest.Prefix(t)
	rs, err := redisstore.New(cc, redisstore.Config{
		Prefix: prefix, NearCache: -1, Slots: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	limit := sluice.GCRA(sluice.PerSecond(1_000_000), 1_000_000)
	allow := func(i int) (sluice.Decision, error) {
		return rs.Take(ctx, sluice.Request{Key: fmt.Sprint("user:", i), Slot: "route", Limit: limit, Cost: 1})
	}

	// Create the keys, all in the slot of "route".
	const keys = 256
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			if _, err := allow(i); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var oneKey string
	for _, k := range redistest.Keys(t, cc, prefix) {
		oneKey = k
		break
	}
	slot, source := slotOf(t, cc, oneKey)
	var target string
	for _, a := range addrs {
		if a != source && target == "" {
			target = a
		}
	}

	// Load: 32 goroutines on the 256 keys, until stopped.
	var errs, decided atomic.Int64
	var firstErr atomic.Value
	done := make(chan struct{})
	var load sync.WaitGroup
	for g := range 32 {
		load.Go(func() {
			for i := g; ; i += 32 {
				select {
				case <-done:
					return
				default:
				}
				d, err := allow(i % keys)
				decided.Add(1)
				if err != nil || !d.Allowed {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%+v %v", d, err))
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	do(t, target, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source])
	do(t, source, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target])
	inSlot := do(t, source, "CLUSTER", "GETKEYSINSLOT", slot, 1000).([]any)
	host, port, _ := strings.Cut(target, ":")
	do(t, source, append([]any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}, inSlot[:len(inSlot)/2]...)...)
	time.Sleep(time.Second) // half the keys on each side
	rest := do(t, source, "CLUSTER", "GETKEYSINSLOT", slot, 1000).([]any)
	if len(rest) > 0 {
		do(t, source, append([]any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}, rest...)...)
	}
	// The target first, then the source (as Redis's own resharding does):
	// a source already pointing at the target while the target still
	// imports would bounce plain requests between them with MOVED.
	do(t, target, "CLUSTER", "SETSLOT", slot, "NODE", ids[target])
	do(t, source, "CLUSTER", "SETSLOT", slot, "NODE", ids[target])
	for _, a := range addrs {
		if a != source && a != target {
			do(t, a, "CLUSTER", "SETSLOT", slot, "NODE", ids[target])
		}
	}
	time.Sleep(200 * time.Millisecond)
	close(done)
	load.Wait()
	t.Logf("%d decisions, %d failed; %d keys in slot %d moved from %s to %s; the client saw %s",
		decided.Load(), errs.Load(), len(inSlot), slot, source, target, seen)
	if errs.Load() > 0 {
		t.Errorf("%d requests failed or were refused, first: %v", errs.Load(), firstErr.Load())
	}
	if seen.tryAgainMerged.Load() == 0 {
		t.Errorf("no TRYAGAIN seen: the test did not exercise merged batches across a half-moved slot")
	}
}
