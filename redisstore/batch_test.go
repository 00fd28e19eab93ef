package redisstore

import (
	"context"
	"errors"
	"maps"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A batch reply is split by the strides it carries; every malformed reply
// is an error, never a panic or a misattributed decision.
func TestSplitReply(t *testing.T) {
	six := []any{int64(1), int64(5), int64(4), int64(0), int64(1), int64(0)}
	good := append(append([]any{int64(6)}, six...), append([]any{int64(8)}, append(six, "7", "")...)...)
	pos := 0
	a, err := splitReply(good, &pos, 1)
	if err != nil || len(a) != 6 || pos != 7 {
		t.Fatalf("first part: %v %v at %d", a, err, pos)
	}
	b, err := splitReply(good, &pos, 1)
	if err != nil || len(b) != 8 || b[6] != "7" || pos != len(good) {
		t.Fatalf("second part: %v %v at %d", b, err, pos)
	}
	for name, reply := range map[string][]any{
		"empty":          {},
		"stride missing": {"6"},
		"stride 7":       append([]any{int64(7)}, six...),
		"short":          append([]any{int64(6)}, six[:5]...),
	} {
		pos := 0
		if _, err := splitReply(reply, &pos, 1); !errors.Is(err, errBadReply) {
			t.Errorf("%s: %v, want errBadReply", name, err)
		}
	}
}

// Compiled limits are cached up to maxCompiled, so that limits named by
// clients (the decision API's explicit limits) cannot grow memory; past it
// they are compiled on every use, to the same result.
func TestCompileCacheBounded(t *testing.T) {
	s, err := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 2 * maxCompiled {
		l := sluice.GCRA(sluice.PerSecond(int64(i+1)), 10)
		c, err := s.compile(&l)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := s.compile(&l)
		if p, _ := c.params.(string); *c != *again || !strings.HasPrefix(p, "5:") {
			t.Fatalf("limit %d: %+v then %+v", i, c, again)
		}
	}
	if n := len(*s.limits.Load()); n != maxCompiled {
		t.Errorf("%d limits cached, want the bound %d", n, maxCompiled)
	}
	bad := sluice.GCRA(sluice.PerSecond(0), 0)
	if _, err := s.compile(&bad); err == nil {
		t.Error("an invalid limit compiled")
	}
}

// cannedClient answers every EVALSHA and FCALL with an admitting decision
// per key, without a server: BenchmarkGoSide measures the store's own work per decision.
type cannedClient struct{ redis.Cmdable }

func (cannedClient) EvalSha(ctx context.Context, _ string, keys []string, _ ...any) *redis.Cmd {
	c := redis.NewCmd(ctx)
	reply := make([]any, 0, 6*len(keys))
	for range keys { // one key per request of the algorithms benchmarked
		reply = append(reply, int64(1), int64(1000000), int64(999999), int64(0), int64(1), int64(0))
	}
	c.SetVal(reply)
	return c
}

func (c cannedClient) FCall(ctx context.Context, _ string, keys []string, args ...any) *redis.Cmd {
	return c.EvalSha(ctx, "", keys, args...)
}

func (cannedClient) Pipeline() redis.Pipeliner { return nil }

// BenchmarkGoSide: the CPU and allocations redisstore adds to one serial
// decision besides the go-redis round trip (prepare, keys, arguments,
// batcher, decoding).
func BenchmarkGoSide(b *testing.B) {
	s, err := New(cannedClient{}, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	lim := sluice.GCRA(sluice.PerSecond(1e6), 1e6)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Take(ctx, sluice.Request{Key: "user:12345", Limit: lim, Cost: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGoSideCheck: the same for a check of three GCRA limits on keys
// of their own (one call of the take function).
func BenchmarkGoSideCheck(b *testing.B) {
	s, err := New(cannedClient{}, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rs := []sluice.Request{
		{Key: "route:12345", Limit: sluice.GCRA(sluice.PerSecond(1e6), 1e6), Cost: 1},
		{Key: "user:12345", Limit: sluice.GCRA(sluice.PerSecond(2e6), 2e6), Cost: 1},
		{Key: "tenant:12345", Limit: sluice.GCRA(sluice.PerSecond(5e5), 5e5), Cost: 1},
	}
	ds := make([]sluice.Decision, len(rs))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := s.TakeAll(ctx, rs, ds); err != nil {
			b.Fatal(err)
		}
	}
}

// heldTrips is a go-redis hook that holds the round trips (commands and
// pipelines) it sees, numbered from 0, until the channel of release that
// the number indexes is closed; the trips past release go through. It
// reports each trip it holds on held.
type heldTrips struct {
	n       atomic.Int64
	held    chan struct{}
	release []chan struct{}
}

func (h *heldTrips) hold() {
	if i := h.n.Add(1) - 1; i < int64(len(h.release)) {
		h.held <- struct{}{}
		<-h.release[i]
	}
}

func (h *heldTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *heldTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "fcall" || cmd.Name() == "evalsha" {
			h.hold()
		}
		return next(ctx, cmd)
	}
}

func (h *heldTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && (cmds[0].Name() == "fcall" || cmds[0].Name() == "evalsha") {
			h.hold() // not a new connection's HELLO
		}
		return next(ctx, cmds)
	}
}

// Calls that queue while a round trip of several calls is in flight share
// the next round trip, rather than each going out alone with an idle
// worker of its own: a round trip costs far more than a call merged into
// one. Lone calls do not hold the others back.
func TestQueuedCallsShareARoundTrip(t *testing.T) {
	const workers, queued = 4, 20
	rdb := redistest.Standalone(t)
	// trips 0 to workers are lone calls, trip workers+1 the calls queued
	// meanwhile
	first, then := make(chan struct{}), make(chan struct{})
	h := &heldTrips{held: make(chan struct{}, 2+workers)}
	for range 1 + workers {
		h.release = append(h.release, first)
	}
	h.release = append(h.release, then)
	lim := sluice.TokenBucket(sluice.PerHour(1000), 1000)
	// first load the function library, whose loading is a round trip more,
	// through another client, so that every connection of rdb's the store
	// takes (its lanes too) has the hook
	other := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	defer other.Close()
	loader, err := New(other, Config{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loader.Take(context.Background(), sluice.Request{Key: "first", Limit: lim, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	loader.Close()
	rdb.AddHook(h)
	s, err := New(rdb, Config{Prefix: redistest.Prefix(t), Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := s.batch.trips.Load()
	var wg sync.WaitGroup
	defer wg.Wait() // after the trips held are let go
	take := func(i int) {
		wg.Go(func() {
			if _, err := s.Take(context.Background(), sluice.Request{Key: "k" + strconv.Itoa(i), Limit: lim, Cost: 1}); err != nil {
				t.Error(err)
			}
		})
	}
	var once [2]sync.Once
	let := func(i int, c chan struct{}) { once[i].Do(func() { close(c) }) }
	defer let(0, first) // so that Close, which waits for the workers, returns on a failure
	defer let(1, then)
	held := func() {
		select {
		case <-h.held:
		case <-time.After(10 * time.Second):
			t.Fatal("a call was not sent: a worker waits for the turn behind a lone call")
		}
	}
	queue := func(from int) { // one by one: each is queued, or a worker sends it
		for i := range queued {
			trips := s.batch.trips.Load()
			take(from + i)
			for start := time.Now(); len(s.batch.queue) <= i && s.batch.trips.Load() == trips && time.Since(start) < 10*time.Second; {
				runtime.Gosched()
			}
		}
	}
	// One call alone runs on its caller's goroutine; then each worker takes
	// one lone call, which does not hold the turn. All are held.
	for i := range 1 + workers {
		take(i)
		held()
	}
	queue(1 + workers) // every worker busy
	let(0, first)
	held()                      // the queued calls, in one round trip
	queue(1 + workers + queued) // the workers are idle, but one round trip of several is in flight
	let(1, then)
	wg.Wait()
	if n, want := s.batch.trips.Load()-before, int64(1+workers+2); n != want {
		t.Errorf("%d round trips, want %d: %d lone calls, then one for each %d calls queued", n, want, 1+workers, queued)
	}
}

// A batch's run of single checks on one key (a hot key under load) reads
// and writes its state once; the hash and the TTL it leaves, and every
// decision, are those of the same checks sent one after another. The run
// changes its limit halfway (the state carried over) and has refusals.
func TestHeldRunLeavesTheHash(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Standalone(t)
	now := time.UnixMicro(1_700_000_000_000_000)
	s, err := New(rdb, Config{Prefix: redistest.Prefix(t), NearCache: -1, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	second := 2 * time.Second
	pairs := [][2]sluice.Limit{
		{sluice.FixedWindow(5, second), sluice.FixedWindow(7, second)},
		{sluice.SlidingWindow(5, second), sluice.SlidingWindow(7, second)},
		{sluice.TokenBucket(sluice.PerSecond(3), 5), sluice.TokenBucket(sluice.PerSecond(4), 7)},
		{sluice.GCRA(sluice.PerSecond(3), 5), sluice.GCRA(sluice.PerSecond(4), 7)},
		{sluice.LeakyBucket(sluice.PerSecond(3), 5), sluice.LeakyBucket(sluice.PerSecond(4), 7)},
		{sluice.WarmUp(sluice.PerSecond(3), second), sluice.WarmUp(sluice.PerSecond(4), second)},
	}
	costs := []int64{1, 2, 0, 3, 1, 4, 0, 2, 1, 1}
	for _, pair := range pairs {
		requests := func(key string) [][]sluice.Request {
			checks := make([][]sluice.Request, len(costs))
			for i, c := range costs {
				checks[i] = []sluice.Request{{Key: key, Limit: pair[i*2/len(costs)], Cost: c}}
			}
			return checks
		}
		for round := range 2 { // the second round finds the keys existing
			now = now.Add(300 * time.Millisecond)
			batched, err := TakeBatch(s, requests("run"), nil)
			if err != nil {
				t.Fatal(err)
			}
			for i, check := range requests("one") {
				d, err := s.Take(ctx, check[0])
				if err != nil {
					t.Fatal(err)
				}
				if d != batched[i][0] {
					t.Fatalf("%s round %d check %d: batched %+v, alone %+v", pair[0], round, i, batched[i][0], d)
				}
			}
			run, _ := s.stateKeys(&sluice.Request{Key: "run", Limit: pair[1]})
			one, _ := s.stateKeys(&sluice.Request{Key: "one", Limit: pair[1]})
			hr, err1 := rdb.HGetAll(ctx, run).Result()
			ho, err2 := rdb.HGetAll(ctx, one).Result()
			tr, err3 := rdb.PTTL(ctx, run).Result()
			to, err4 := rdb.PTTL(ctx, one).Result()
			if err := errors.Join(err1, err2, err3, err4); err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(hr, ho) {
				t.Errorf("%s round %d: the run left %v, the checks one by one %v", pair[0], round, hr, ho)
			}
			if d := tr - to; d < -time.Second || d > time.Second || (tr < 0) != (to < 0) {
				t.Errorf("%s round %d: TTL %v after the run, %v after the checks one by one", pair[0], round, tr, to)
			}
		}
	}
}

// A take call of one request reads a reply packed into one integer (an
// admitting bucket's decision, see packed in reply.lua) as the decision,
// whether the caller reads it alone or as a check's (decode); any other
// integer is a bad reply, not a decision.
func TestPackedReply(t *testing.T) {
	take := scripts().takeOne[sluice.AlgorithmGCRA]
	reply := func(v any) *redis.Cmd {
		cmd := redis.NewCmd(context.Background())
		cmd.SetVal(v)
		return cmd
	}
	want := sluice.Decision{Allowed: true, Limit: 10, Remaining: 4, ResetAfter: 7 * time.Microsecond}
	c := &call{script: take, n: 1, limit: 10, packed: -1}
	got, err := c.values(reply(int64(7*11 + 4)))
	if d, ok := c.unpacked(); err != nil || got != nil || !ok || d != want {
		t.Errorf("packed 81, limit 10: %v %v %v %v, want %v", got, err, d, ok, want)
	}
	ds := []sluice.Decision{{}, {}}
	if _, err := c.decode(decisionView{ds: ds, idx: []int{1}}); err != nil || ds[1] != want || ds[0] != (sluice.Decision{}) {
		t.Errorf("packed 81 as the second decision of a check: %v %v, want %v", ds, err, want)
	}
	if _, err := c.decode(ds); !errors.Is(err, errBadReply) {
		t.Errorf("one packed decision for two: %v, want a bad reply", err)
	}
	for _, bad := range []*call{
		{script: take, n: 1, limit: 10, packed: -1}, // a negative integer
		{script: take, n: 2, limit: 10, packed: -1},
		{script: scripts().release, n: 1, limit: 10, packed: -1},
	} {
		v := int64(81)
		if bad.n == 1 && bad.script == take {
			v = -1
		}
		if got, err := bad.values(reply(v)); !errors.Is(err, errBadReply) {
			t.Errorf("%d for %d requests of %s: %v %v, want a bad reply", v, bad.n, bad.script.name, got, err)
		}
	}
}
