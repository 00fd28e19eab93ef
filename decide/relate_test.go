package decide_test

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// relateStores are a memstore, a Redis and a Redis Cluster store, each
// fresh; client is the Redis client of the Redis ones (nil for memstore).
func relateStores(t *testing.T) map[string]struct {
	store  sluice.Store
	client redis.UniversalClient
} {
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	out := map[string]struct {
		store  sluice.Store
		client redis.UniversalClient
	}{"memstore": {mem, nil}}
	for name, c := range map[string]redis.UniversalClient{"redis": redistest.Standalone(t), "cluster": redistest.Cluster(t)} {
		s, err := redisstore.New(c, redisstore.Config{Prefix: redistest.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out[name] = struct {
			store  sluice.Store
			client redis.UniversalClient
		}{s, c}
	}
	return out
}

// relating returns a reads check that applies while writes (10 an hour)
// uses more than 80%, planned beside a per-client check, as a policy plans
// a rule's limits; and the writes check itself.
func relating(client string) (reads, perClient, writes decide.Check) {
	writes = decide.Check{Name: "writes", Key: string(decide.AppendKey(nil, "w", "writes", client)), Limit: sluice.FixedWindow(10, time.Hour), Cost: 1}
	reads = decide.Check{Name: "reads", Key: string(decide.AppendKey(nil, "r", "reads", client)), Limit: sluice.FixedWindow(3, time.Hour), Cost: 1,
		When: &decide.Relation{Name: "writes", Key: writes.Key, Limit: writes.Limit, Above: 800}}
	perClient = decide.Check{Name: "per-client", Key: string(decide.AppendKey(nil, "r", "per-client", client)), Limit: sluice.FixedWindow(100, time.Hour), Cost: 1}
	return reads, perClient, writes
}

// TestRelation: on every store, reads are neither checked nor charged
// while writes are at or under 80% of their budget (8 of 10), and are
// checked and charged once writes pass it; each client's writes count for
// its own reads only. On the Cluster, the writes key lives in another slot
// than the reads keys, which are checked together in one script.
func TestRelation(t *testing.T) {
	for name, s := range relateStores(t) {
		t.Run(name, func(t *testing.T) {
			lim := sluice.New(s.store)
			dc, err := decide.New(lim, decide.Config{RelateFor: -1, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			reads, perClient, writes := relating("203.0.113.7")
			run := func() *decide.Result {
				var res decide.Result
				dc.Run(ctx, []decide.Check{reads, perClient}, &res)
				return &res
			}
			for i := range 8 { // writes at 0..7 of 10, then 8: at the share
				if res := run(); res.Outcome != decide.Admitted || len(res.Idle) != 1 || res.Idle[0].Name != "reads" || len(res.Enforced) != 1 {
					t.Fatalf("writes at %d: outcome %v, idle %d, enforced %d; want reads idle", i, res.Outcome, len(res.Idle), len(res.Enforced))
				}
				if _, err := lim.Check(ctx, sluice.Request{Key: writes.Key, Limit: writes.Limit, Cost: 1}); err != nil {
					t.Fatal(err)
				}
			}
			if res := run(); len(res.Idle) != 1 || res.Fields().Policy != `"per-client";q=100;w=3600` {
				t.Fatalf("writes at 8 of 10 (80%%): idle %d, RateLimit-Policy %q; want reads idle and left out", len(res.Idle), res.Fields().Policy)
			}
			if got := remainingOn(t, lim, reads); got != 3 {
				t.Fatalf("reads has %d left while idle; want 3 (never charged)", got)
			}
			lim.Check(ctx, sluice.Request{Key: writes.Key, Limit: writes.Limit, Cost: 1}) // 9 of 10: busy
			admitted := 0
			for range 5 {
				res := run()
				if len(res.Idle) != 0 || len(res.Enforced) != 2 {
					t.Fatalf("writes busy: idle %d, enforced %d; want reads checked", len(res.Idle), len(res.Enforced))
				}
				if res.Outcome == decide.Admitted {
					admitted++
				}
			}
			if admitted != 3 {
				t.Fatalf("writes busy: %d of 5 reads admitted, want 3 (the reads limit)", admitted)
			}
			other, otherClient, _ := relating("198.51.100.1")
			var res decide.Result
			dc.Run(ctx, []decide.Check{other, otherClient}, &res)
			if len(res.Idle) != 1 {
				t.Fatalf("another client, whose writes are idle: %d idle, want its reads idle", len(res.Idle))
			}
			if s.client != nil {
				assertSlots(t, s.client, name)
			}
		})
	}
}

func remainingOn(t *testing.T, lim *sluice.Limiter, c decide.Check) int64 {
	t.Helper()
	d, err := lim.AllowN(context.Background(), c.Key, c.Limit, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// assertSlots checks, on a cluster, that the test's keys do not all share
// one slot: the related key was read in a call of its own.
func assertSlots(t *testing.T, c redis.UniversalClient, name string) {
	t.Helper()
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return
	}
	keys := redistest.Keys(t, cc, "sluicetest:")
	slots := map[int64]bool{}
	for _, k := range keys {
		s, err := cc.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[s] = true
	}
	if len(slots) < 2 {
		t.Fatalf("%s: the keys %q share one slot; the test wants the related key in another", name, keys)
	}
}

// countingStore counts the peeks (a Take of cost 0) of a real store and
// makes each take delay long on the clock of its synctest bubble, as a
// slow store would.
type countingStore struct {
	sluice.Store
	delay time.Duration
	takes atomic.Int64
}

func (s *countingStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	if r.Cost == 0 {
		s.takes.Add(1)
		time.Sleep(s.delay)
	}
	return s.Store.Take(ctx, r)
}

// TestRelationStaleness tries to break the guarantee of Config.RelateFor
// (100ms): the busy state a decision uses comes from a peek sent at most
// 100ms before. The peek takes 60ms to answer, so a cache that dated its
// entries by the answer would use a state 160ms old. The state changes
// both ways (idle to busy, busy to idle) right after a peek.
func TestRelationStaleness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, err := memstore.New(memstore.Config{Resolution: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		store := &countingStore{Store: mem, delay: 60 * time.Millisecond}
		lim := sluice.New(store)
		dc, err := decide.New(lim, decide.Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		reads, _, writes := relating("c")
		reads.Limit = sluice.FixedWindow(1000, time.Hour)
		ctx := context.Background()
		idle := func() bool {
			var res decide.Result
			dc.Run(ctx, []decide.Check{reads}, &res)
			return len(res.Idle) == 1
		}
		direct := sluice.New(mem) // charges writes without a peek of the counting store
		setWrites := func(delta int64) {
			if _, err := direct.Adjust(ctx, sluice.Request{Key: writes.Key, Limit: writes.Limit, Cost: delta}); err != nil {
				t.Fatal(err)
			}
		}
		until := func(t0 time.Time, d time.Duration) { time.Sleep(time.Until(t0.Add(d))) }
		start := time.Now()
		if !idle() { // peek sent at 0, answered at 60ms
			t.Fatal("writes unused: reads checked")
		}
		setWrites(9) // busy from 60ms on
		until(start, 99*time.Millisecond)
		if !idle() {
			t.Fatal("at 99ms the peek sent at 0ms is fresh: want it reused (reads idle)")
		}
		until(start, 100*time.Millisecond)
		sent, peeks := time.Now(), store.takes.Load()
		if idle() {
			t.Fatal("at 100ms the peek sent at 0ms is stale, yet the idle state it saw was used")
		}
		if n := store.takes.Load() - peeks; n != 1 {
			t.Fatalf("%d peeks at 100ms, want one", n)
		}
		setWrites(-9) // idle again, right after the busy state was read
		until(sent, 99*time.Millisecond)
		if idle() {
			t.Fatal("99ms after the busy peek was sent: want it reused (reads checked)")
		}
		until(sent, 100*time.Millisecond)
		if !idle() {
			t.Fatal("100ms after the busy peek was sent, its state was still used")
		}
	})
}

// TestRelationUnknownApplies: when the related limit cannot be read (a
// store that fails), the relating check applies: it is checked and
// charged, never admitted because of a state nobody saw.
func TestRelationUnknownApplies(t *testing.T) {
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	lim := sluice.New(mem)
	dc, err := decide.New(lim, decide.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	reads, _, writes := relating("c")
	reads.When.Limit = sluice.Limit{Algorithm: writes.Limit.Algorithm} // invalid: the peek fails
	var res decide.Result
	dc.Run(context.Background(), []decide.Check{reads}, &res)
	if len(res.Idle) != 0 || len(res.Enforced) != 1 || res.Outcome != decide.Admitted {
		t.Fatalf("related limit unreadable: idle %d, enforced %d, outcome %v; want reads checked", len(res.Idle), len(res.Enforced), res.Outcome)
	}
	if got := remainingOn(t, lim, reads); got != 2 {
		t.Fatalf("reads has %d left, want 2: charged", got)
	}
}

// TestRelations: the relations of a front-end's own list resolve to the
// index of the limit each relates to; one to no limit, to itself, in a
// cycle, or with a share out of range is an error naming the limit.
func TestRelations(t *testing.T) {
	names := []string{"a", "b", "c", "d"}
	w := func(limit string, above int64) *decide.When { return &decide.When{Limit: limit, Above: above} }
	got, err := decide.Relations(names, []*decide.When{nil, w("a", 800), w("b", 1000), w("b", 1)})
	if err != nil || !slices.Equal(got, []int{-1, 0, 1, 1}) {
		t.Fatalf("Relations: %v, %v; want [-1 0 1 1]", got, err)
	}
	for _, tc := range []struct {
		whens []*decide.When
		want  string
	}{
		{[]*decide.When{nil, w("e", 800), nil, nil}, `limit "b": When.Limit "e" names no limit of the list`},
		{[]*decide.When{nil, w("b", 800), nil, nil}, `limit "b": When.Limit is the limit itself`},
		{[]*decide.When{w("c", 800), w("a", 800), w("b", 800), w("a", 800)}, `limit "a": the relations form a cycle: a → c → b → a`},
		{[]*decide.When{nil, w("a", 0), nil, nil}, `limit "b": When.Above must be 1 to 1000 thousandths (got 0)`},
		{[]*decide.When{nil, w("a", 1001), nil, nil}, `limit "b": When.Above must be 1 to 1000 thousandths (got 1001)`},
	} {
		if _, err := decide.Relations(names, tc.whens); err == nil || err.Error() != tc.want {
			t.Errorf("Relations: %v, want %q", err, tc.want)
		}
	}
}
