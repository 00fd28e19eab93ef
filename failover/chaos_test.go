package failover_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/sched"
	"github.com/sluicehq/sluice/redisstore"
	"go.uber.org/goleak"
)

// The chaos tests run real redis-server processes of their own (never the
// shared ones of redistest.Standalone), kill, freeze and restart them under
// a bounded load, and check what callers saw.

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{}) // go-redis logs every failed dial of an outage
	goleak.VerifyTestMain(m, redialer)
}

// redialer is go-redis's background retry of a failed dial: it sleeps a
// second between attempts and notices only then that its pool was closed.
var redialer = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// noLeaks checks, after every cleanup of t has run (servers killed,
// stores and clients closed), that t left no goroutine behind.
func noLeaks(t *testing.T, opts ...goleak.Option) {
	opts = append(opts, goleak.IgnoreCurrent())
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// clientOptions are the go-redis settings docs/operations.md recommends in
// front of failover: socket timeouts near the deadline, so a pipeline stuck
// on a hung server is freed soon, and no retries of commands or dials,
// which a 50 ms deadline leaves no room for (the breaker is the retry
// policy): a refused dial fails at once. No maintenance notifications, as
// sluice serve: the store's round trips then go on lanes of their own.
func clientOptions() *redis.Options {
	return &redis.Options{
		DialTimeout:              100 * time.Millisecond,
		ReadTimeout:              100 * time.Millisecond,
		WriteTimeout:             100 * time.Millisecond,
		ContextTimeoutEnabled:    true,
		MaxRetries:               -1,
		DialerRetries:            1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// roomy is the deadline of the chaos tests whose subject is not the
// deadline itself (TestChaosHang's is). They run on shared 2-core machines
// under the race detector, where a healthy loopback call to Redis now and
// then takes 50-150 ms; with the production 50 ms deadline, the eight
// workers' calls in flight during such a stall fail together, five
// failures in a row open the breaker with Redis healthy, and the test sees
// degraded decisions before the fault or after the recovery it checks.
// A server that is killed or restarted fails calls at once (EOF, refused
// connections), so the longer deadline does not slow what those tests
// measure.
const roomy = time.Second

// roomyOptions are clientOptions with socket timeouts matching the roomy
// deadline: a read timeout below the deadline would fail the call first.
func roomyOptions() *redis.Options {
	o := clientOptions()
	o.ReadTimeout, o.WriteTimeout = roomy, roomy
	return o
}

// errRecorder is a sluice.Store that passes calls through to another and
// keeps the distinct errors it returned, to show which real errors a
// scenario produced.
type errRecorder struct {
	sluice.Store
	mu   sync.Mutex
	seen map[string]int
}

func (e *errRecorder) note(err error) error {
	if err != nil {
		msg := err.Error()
		if i := strings.Index(msg, "): "); i >= 0 && strings.HasPrefix(msg, "redisstore:") {
			msg = msg[i+3:] // what Redis or the connection said
		}
		e.mu.Lock()
		if e.seen == nil {
			e.seen = map[string]int{}
		}
		e.seen[msg]++
		e.mu.Unlock()
	}
	return err
}

func (e *errRecorder) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	d, err := e.Store.Take(ctx, r)
	return d, e.note(err)
}

func (e *errRecorder) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	return e.note(e.Store.TakeAll(ctx, rs, ds))
}

func (e *errRecorder) errors() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var parts []string
	for k, v := range e.seen {
		parts = append(parts, fmt.Sprintf("%dx %s", v, k))
	}
	return strings.Join(parts, "; ")
}

func (e *errRecorder) sawPrefix(p string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := range e.seen {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// stack builds redisstore → errRecorder → failover.Store on client c.
func stack(t *testing.T, c redisstore.Client, cfg failover.Config) (*failover.Store, *errRecorder) {
	t.Helper()
	rs, err := redisstore.New(c, redisstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	rec := &errRecorder{Store: rs}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return newStore(t, rec, cfg), rec
}

// outcome of one call under load.
type sample struct {
	start, end time.Time
	d          sluice.Decision
	err        error
}

// load calls fn from workers goroutines, each pausing pause between calls,
// until stop is called, which returns every call's sample.
// stop also runs when t ends, so a failed test leaves no goroutine behind.
func load(t *testing.T, workers int, pause time.Duration, fn func() (sluice.Decision, error)) (stop func() []sample) {
	var (
		mu   sync.Mutex
		all  []sample
		wg   sync.WaitGroup
		done = make(chan struct{})
	)
	for range workers {
		wg.Go(func() {
			var mine []sample
			for {
				select {
				case <-done:
					mu.Lock()
					all = append(all, mine...)
					mu.Unlock()
					return
				default:
				}
				s := sample{start: time.Now()}
				s.d, s.err = fn()
				s.end = time.Now()
				mine = append(mine, s)
				time.Sleep(pause)
			}
		})
	}
	stop = sync.OnceValue(func() []sample {
		close(done)
		wg.Wait()
		return all
	})
	t.Cleanup(func() { stop() })
	return stop
}

// waitState polls s until it is in state want, for at most limit, and
// returns when it got there.
func waitState(t *testing.T, s *failover.Store, want failover.State, limit time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for s.State() != want {
		if time.Now().After(deadline) {
			t.Fatalf("breaker still %v after %v, want %v (stats %+v)", s.State(), limit, want, s.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Now()
}

// fallbackSpan checks the samples of a failover in fallback mode: no caller
// saw an error, and some requests were decided by the fallback. It calls
// report with how many were and when the last of them ended, and returns
// that time.
func fallbackSpan(t *testing.T, samples []sample, report func(degraded int, last time.Time)) time.Time {
	t.Helper()
	var last time.Time
	degraded := 0
	for _, x := range samples {
		if x.err != nil {
			t.Fatalf("a caller got an error in fallback mode: %v", x.err)
		}
		if x.d.Degraded {
			degraded++
			if x.end.After(last) {
				last = x.end
			}
		}
	}
	report(degraded, last)
	if degraded == 0 {
		t.Fatal("no request was decided by the fallback: the failover was not exercised")
	}
	return last
}

// TestChaosKillRestart: kill -9 the server under load, restart it on the
// same port. Fallback mode: no caller sees an error, the breaker opens
// within its failures, the fallback holds its scaled limit, and traffic
// returns to Redis within about one probe interval of the restart.
func TestChaosKillRestart(t *testing.T) {
	noLeaks(t)
	p := redistest.StartProcess(t)
	const (
		workers = 8
		probe   = 300 * time.Millisecond
		n       = 5
	)
	var (
		openMu sync.Mutex
		opened []time.Time
		s      *failover.Store
	)
	s, rec := stack(t, p.Client(roomyOptions()), failover.Config{
		Timeout:             roomy,
		ConsecutiveFailures: n,
		ProbeInterval:       probe,
		Mode:                modeAll(failover.Fallback),
		FallbackScale:       0.5,
		OnStateChange: func(from, to failover.State) {
			if to == failover.StateOpen && from == failover.StateClosed {
				openMu.Lock()
				opened = append(opened, time.Now())
				openMu.Unlock()
			}
		},
	})
	limiter := sluice.New(s)
	limit := sluice.TokenBucket(sluice.PerSecond(200), 20) // in fallback: 100/s, burst 10
	stop := load(t, workers, time.Millisecond, func() (sluice.Decision, error) {
		return limiter.Allow(context.Background(), "chaos", limit)
	})

	time.Sleep(400 * time.Millisecond)
	killed := time.Now()
	p.Kill()
	waitState(t, s, failover.StateOpen, 2*time.Second)
	time.Sleep(time.Second) // an outage of a second, under load
	p.Restart()
	restarted := time.Now()
	closed := waitState(t, s, failover.StateClosed, probe+2*time.Second)
	time.Sleep(400 * time.Millisecond)
	samples := stop()

	t.Logf("%d calls; back on Redis %v after the restart (probe interval %v); stats %+v; errors seen: %s",
		len(samples), closed.Sub(restarted).Round(time.Millisecond), probe, s.Stats(), rec.errors())
	if back := closed.Sub(restarted); back > probe+time.Second {
		t.Errorf("back on Redis %v after the restart, want about one probe interval (%v)", back, probe)
	}
	openMu.Lock()
	if len(opened) != 1 || opened[0].Sub(killed) > 500*time.Millisecond {
		// A dead server refuses at once: its n failures in a row come
		// within a few round trips (the calls in flight at the kill, which
		// fail together, count once).
		t.Errorf("the breaker opened from closed at %v after the kill, want once, within 500ms", durations(opened, killed))
	} else {
		t.Logf("the breaker opened %v after the kill", opened[0].Sub(killed).Round(time.Millisecond))
	}
	openMu.Unlock()

	var first, last time.Time
	admitted, degraded := 0, 0
	for _, x := range samples {
		if x.err != nil {
			t.Fatalf("a caller got an error fallback mode never returns: %v", x.err)
		}
		if x.start.Before(killed) && x.end.Before(killed) && x.d.Degraded {
			t.Fatalf("a degraded decision before the kill: %+v", x.d)
		}
		if x.start.After(closed) && x.d.Degraded {
			t.Fatalf("a degraded decision %v after the breaker closed", x.start.Sub(closed))
		}
		if !x.d.Degraded {
			continue
		}
		degraded++
		if first.IsZero() || x.start.Before(first) {
			first = x.start
		}
		if x.end.After(last) {
			last = x.end
		}
		if x.d.Allowed {
			admitted++
		}
	}
	// The fallback is a token bucket of 100/s and burst 10: over the
	// outage it admits at most 10 + 100/s × its length (+1 for rounding).
	bound := 10 + int(100*last.Sub(first).Seconds()) + 1
	t.Logf("outage %v: %d degraded decisions, %d admitted (bound %d)", last.Sub(first).Round(time.Millisecond), degraded, admitted, bound)
	if degraded == 0 || admitted == 0 {
		t.Fatal("no degraded decisions: the outage was not exercised")
	}
	if admitted > bound {
		t.Errorf("the fallback admitted %d during the outage, more than its scaled bound %d", admitted, bound)
	}
	if admitted == degraded {
		t.Errorf("the fallback refused nothing under a load of %d decisions", degraded)
	}
}

// durations returns each of ts as the time since t0.
func durations(ts []time.Time, t0 time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, x := range ts {
		out[i] = x.Sub(t0).Round(time.Millisecond)
	}
	return out
}

// TestChaosHang: a server that stops answering (SIGSTOP) costs each call
// at most the deadline, the breaker opens, and SIGCONT brings traffic back.
func TestChaosHang(t *testing.T) {
	noLeaks(t)
	p := redistest.StartProcess(t)
	const timeout, probe = 50 * time.Millisecond, 300 * time.Millisecond
	s, _ := stack(t, p.Client(clientOptions()), failover.Config{Timeout: timeout, ProbeInterval: probe, Mode: modeAll(failover.FailOpen)})
	limiter := sluice.New(s)
	stop := load(t, 8, time.Millisecond, func() (sluice.Decision, error) {
		return limiter.Allow(context.Background(), "hang", sluice.GCRA(sluice.PerSecond(1000), 100))
	})
	time.Sleep(300 * time.Millisecond)
	late := sched.Lateness()
	p.Freeze()
	frozen := time.Now()
	waitState(t, s, failover.StateOpen, time.Second)
	time.Sleep(500 * time.Millisecond)
	p.Thaw()
	thawed := time.Now()
	waitState(t, s, failover.StateClosed, probe+2*time.Second)
	samples := stop()
	lateBy := late()

	slowest := time.Duration(0)
	for _, x := range samples {
		if x.err != nil {
			t.Fatalf("fail-open mode returned an error: %v", x.err)
		}
		if x.start.After(frozen) && x.end.Before(thawed) {
			slowest = max(slowest, x.end.Sub(x.start))
		}
	}
	t.Logf("%d calls; slowest while frozen %v; timers late by up to %v; stats %+v", len(samples), slowest, lateBy, s.Stats())
	// The deadline plus what the scheduler added, measured in the same run
	// (a call's deadline timer and its goroutine wait as a bare timer does),
	// with 100 ms for the rest.
	if slowest > timeout+lateBy+100*time.Millisecond {
		t.Errorf("a call took %v while the server hung, want about the %v deadline (timers were late by up to %v)", slowest, timeout, lateBy)
	}
	if st := s.Stats(); st.Opens < 1 || st.DegradedOpen == 0 {
		t.Errorf("stats %+v: the breaker never opened or nothing was admitted open", st)
	}
}

// TestChaosScriptFlush: FUNCTION FLUSH and SCRIPT FLUSH under load fail no
// request; redisstore loads its function library again when a call finds
// it missing (and its scripts on NOSCRIPT), unseen by the breaker.
func TestChaosScriptFlush(t *testing.T) {
	noLeaks(t)
	p := redistest.StartProcess(t)
	admin := p.Client(nil)
	s, rec := stack(t, p.Client(roomyOptions()), failover.Config{Timeout: roomy, Mode: modeAll(failover.FailClosed)})
	limiter := sluice.New(s)
	stop := load(t, 8, time.Millisecond, func() (sluice.Decision, error) {
		return limiter.Check(context.Background(),
			sluice.Request{Key: "a", Limit: sluice.FixedWindow(1_000_000, time.Minute), Cost: 1},
			sluice.Request{Key: "b", Limit: sluice.SlidingWindow(1_000_000, time.Minute), Cost: 1})
	})
	for range 5 {
		time.Sleep(150 * time.Millisecond)
		if err := admin.FunctionFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(150 * time.Millisecond)
	samples := stop()
	for _, x := range samples {
		if x.err != nil || x.d.Degraded || !x.d.Allowed {
			t.Fatalf("around SCRIPT FLUSH: %+v, %v", x.d, x.err)
		}
	}
	if st := s.Stats(); st.Failures != 0 {
		t.Fatalf("stats %+v; errors %s", st, rec.errors())
	}
	t.Logf("%d checks across 5 FUNCTION FLUSH and SCRIPT FLUSH, none failed", len(samples))
}

// TestChaosRestartEmptiesState: a server restarted without persistence has
// forgotten every count; decisions resume from an empty state.
func TestChaosRestartEmptiesState(t *testing.T) {
	noLeaks(t)
	p := redistest.StartProcess(t)
	s, _ := stack(t, p.Client(roomyOptions()), failover.Config{Timeout: roomy, Mode: modeAll(failover.Fallback)})
	limiter := sluice.New(s)
	limit := sluice.FixedWindow(5, time.Hour)
	for i := range 4 {
		d, err := limiter.Allow(ctx, "user", limit)
		if err != nil || !d.Allowed || d.Degraded || d.Remaining != int64(4-i) {
			t.Fatalf("before the restart, call %d: %+v, %v", i, d, err)
		}
	}
	p.Restart()
	// The first call finds its pooled connection dead: a failure, decided by
	// the fallback. Redis decides again from the next one on.
	var d sluice.Decision
	for range 3 {
		var err error
		if d, err = limiter.Allow(ctx, "user", limit); err != nil {
			t.Fatal(err)
		}
		if !d.Degraded {
			break
		}
	}
	if d.Degraded || !d.Allowed || d.Remaining < 3 {
		t.Fatalf("after the restart: %+v, want a fresh window on Redis (4 or 3 remaining)", d)
	}
}

// TestChaosReadOnly: a client pointed at a read-only replica gets READONLY
// from every script; failover counts it as a failure and fails closed.
func TestChaosReadOnly(t *testing.T) {
	noLeaks(t)
	primary := redistest.StartProcess(t)
	replica := redistest.StartProcess(t, "--replicaof", "127.0.0.1", fmt.Sprint(primary.Port), "--replica-read-only", "yes")
	s, rec := stack(t, replica.Client(clientOptions()), failover.Config{ConsecutiveFailures: 3, Mode: modeAll(failover.FailClosed)})
	for i := range 5 {
		_, err := s.Take(ctx, unit)
		if !errors.Is(err, failover.ErrUnavailable) {
			t.Fatalf("call %d on a replica: %v, want ErrUnavailable", i, err)
		}
	}
	if !rec.sawPrefix("READONLY") {
		t.Fatalf("no READONLY error: %s", rec.errors())
	}
	if st := s.Stats(); st.Failures != 3 || st.Opens != 1 || s.State() != failover.StateOpen {
		t.Fatalf("stats %+v, state %v: READONLY not counted as a failure", st, s.State())
	}
	t.Logf("errors: %s", rec.errors())
}

// TestChaosLoading: a server loading its dataset answers LOADING; failover
// counts it as a failure, decides by the fallback meanwhile, and returns to
// Redis once the load ends.
func TestChaosLoading(t *testing.T) {
	noLeaks(t)
	p := redistest.StartProcess(t, "--key-load-delay", "500", "--loading-process-events-interval-bytes", "1024")
	admin := p.Client(nil)
	pipe := admin.Pipeline()
	for i := range 3000 { // 3000 keys × 500 µs: about 1.5 s of loading
		pipe.Set(ctx, fmt.Sprint("filler:", i), strings.Repeat("x", 64), 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if err := admin.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.Restart() // returns as soon as the server answers, LOADING included
	// A loading server answers between chunks of its load; give it time to.
	opts := clientOptions()
	opts.ReadTimeout = time.Second
	s, rec := stack(t, p.Client(opts), failover.Config{Timeout: time.Second, ConsecutiveFailures: 3, ProbeInterval: 200 * time.Millisecond, Mode: modeAll(failover.Fallback)})
	sawDegraded := false
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := s.Take(ctx, unit)
		if err != nil {
			t.Fatalf("fallback mode returned an error: %v", err)
		}
		if d.Degraded {
			sawDegraded = true
		} else if sawDegraded {
			break // loaded, and Redis decides again
		}
		if time.Now().After(deadline) {
			t.Fatalf("no LOADING then recovery within 20s: degraded %v, errors %s", sawDegraded, rec.errors())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !rec.sawPrefix("LOADING") {
		t.Fatalf("no LOADING error seen: %s", rec.errors())
	}
	if st := s.Stats(); st.Opens < 1 || st.DegradedFallback == 0 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("errors: %s; stats %+v", rec.errors(), s.Stats())
}

// TestChaosClusterFailover: a Redis Cluster of 3 masters and 3 replicas
// loses a master (kill -9) under load; its replica is promoted after the
// node timeout. Requests meanwhile are decided by fallback, none fails,
// and once the replica serves, Redis decides them again.
func TestChaosClusterFailover(t *testing.T) {
	noLeaks(t, redialer)
	start := time.Now()
	nodes, addrs := startCluster(t, 1)

	opts := clientOptions()
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs, DialTimeout: opts.DialTimeout, ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout,
		ContextTimeoutEnabled: true, MaxRetries: -1,
		// Learn a promotion soon even without MOVED replies: the dead
		// master never answers one.
		ClusterStateReloadInterval: time.Second,
	})
	t.Cleanup(func() { cc.Close() })
	if err := cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	s, rec := stack(t, cc, failover.Config{
		ProbeInterval: 300 * time.Millisecond, Mode: modeAll(failover.Fallback), FallbackScale: 0.5,
		OnStateChange: func(_, to failover.State) {
			if to == failover.StateOpen {
				cc.ReloadState(ctx) // asynchronous: asks go-redis to reread the slots
			}
		},
	})
	limiter := sluice.New(s)
	var mu sync.Mutex
	i := 0
	stop := load(t, 8, 2*time.Millisecond, func() (sluice.Decision, error) {
		mu.Lock()
		i++
		key := fmt.Sprint("user:", i%32) // spread over every master
		mu.Unlock()
		return limiter.Allow(context.Background(), key, sluice.GCRA(sluice.PerSecond(1000), 100))
	})

	time.Sleep(300 * time.Millisecond)
	victim := masterOf(t, nodes)
	killed := time.Now()
	victim.Kill()
	// Wait for the promotion, then for traffic to be decided by Redis again.
	alive := make([]*redistest.Process, 0, 5)
	for _, n := range nodes {
		if n != victim {
			alive = append(alive, n)
		}
	}
	waitCluster(t, alive, 20*time.Second)
	promoted := time.Now()
	time.Sleep(time.Second)
	samples := stop()

	lastDegraded := fallbackSpan(t, samples, func(degraded int, last time.Time) {
		t.Logf("%d calls; cluster ok again %v after the kill; %d degraded, the last %v after the kill; stats %+v; errors seen: %s; test took %v",
			len(samples), promoted.Sub(killed).Round(time.Millisecond), degraded, last.Sub(killed).Round(time.Millisecond),
			s.Stats(), rec.errors(), time.Since(start).Round(time.Millisecond))
	})
	// go-redis rereads the slot map at most a second after it is due,
	// then the next probe (300ms) closes the breaker.
	if lastDegraded.After(promoted.Add(time.Second + 300*time.Millisecond + 300*time.Millisecond)) {
		t.Errorf("degraded decisions went on %v after the promotion", lastDegraded.Sub(promoted))
	}
}

// startCluster starts a Redis Cluster of 3 masters, each with replicas
// replicas, from redis-server processes of t's own (redistest.StartProcess),
// joined by redis-cli --cluster create, and waits until every node serves
// every slot. It returns the nodes and their addresses.
func startCluster(t *testing.T, replicas int) ([]*redistest.Process, []string) {
	t.Helper()
	nodes := make([]*redistest.Process, 3*(1+replicas))
	addrs := make([]string, len(nodes))
	for i := range nodes {
		nodes[i] = redistest.StartProcess(t, "--cluster-enabled", "yes", "--cluster-node-timeout", "1000", "--cluster-replica-validity-factor", "0")
		addrs[i] = nodes[i].Addr
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", fmt.Sprint(replicas), "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	waitCluster(t, nodes, 20*time.Second)
	return nodes, addrs
}

// waitCluster waits until every node reports cluster_state:ok with every
// slot served, and three of the nodes are masters.
func waitCluster(t *testing.T, nodes []*redistest.Process, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, masters := true, 0
		for _, n := range nodes {
			c := redis.NewClient(&redis.Options{Addr: n.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
			info, err := c.ClusterInfo(ctx).Result()
			repl, rerr := c.Info(ctx, "replication").Result()
			c.Close()
			if err != nil || rerr != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
				ok = false
				break
			}
			if strings.Contains(repl, "role:master") {
				masters++
			}
		}
		if ok && masters == 3 {
			return
		}
		if time.Now().After(deadline) {
			c := redis.NewClient(&redis.Options{Addr: nodes[0].Addr})
			info, _ := c.ClusterNodes(ctx).Result()
			c.Close()
			var logs strings.Builder
			for _, n := range nodes {
				b, _ := os.ReadFile(filepath.Join(n.Dir, "redis.log"))
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				for _, l := range lines {
					if strings.Contains(strings.ToLower(l), "fail") || strings.Contains(l, "lection") {
						fmt.Fprintf(&logs, "%s: %s\n", n.Addr, l)
					}
				}
			}
			t.Fatalf("cluster not ok with 3 masters within %v; CLUSTER NODES:\n%s\n%s", limit, info, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// masterOf returns a node that is a master with slots.
func masterOf(t *testing.T, nodes []*redistest.Process) *redistest.Process {
	t.Helper()
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		info, err := c.Info(ctx, "replication").Result()
		c.Close()
		if err == nil && strings.Contains(info, "role:master") {
			return n
		}
	}
	t.Fatal("no master found")
	return nil
}
