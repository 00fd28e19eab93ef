package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var ctx = context.Background()

func newStore(t *testing.T, c redisstore.Client, cfg redisstore.Config) *redisstore.Store {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = redistest.Prefix(t)
	}
	s, err := redisstore.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// exact lists limits that admit exactly bound requests in a run of a few
// seconds on the real clock: nothing refills or expires meanwhile.
var exact = []struct {
	lim   sluice.Limit
	bound int64
}{
	{sluice.SlidingLog(300, time.Hour), 300},
	{sluice.SlidingWindow(300, 24*time.Hour), 300},
	{sluice.TokenBucket(sluice.PerHour(1), 300), 300},
	{sluice.GCRA(sluice.PerHour(1), 300), 300},
	{sluice.LeakyBucket(sluice.PerHour(1), 299).WithNoDelay(299), 300},
	{sluice.Concurrency(300, time.Hour), 300},
}

// TestManyInstancesExactBound: three instances (three clients, three
// stores) with 32 goroutines each flood one key; together they admit exactly
// the limit's bound, never more. On the cluster too, and with the instances'
// local clocks jumping back and forth, which must change nothing: every
// decision is made on Redis's clock.
func TestManyInstancesExactBound(t *testing.T) {
	for _, deploy := range []string{"standalone", "cluster"} {
		for _, skew := range []bool{false, true} {
			for _, tc := range exact {
				name := fmt.Sprintf("%s/skew=%v/%s", deploy, skew, tc.lim.Algorithm)
				t.Run(name, func(t *testing.T) {
					prefix := redistest.Prefix(t)
					var stores []*redisstore.Store
					for range 3 {
						var c redisstore.Client
						if deploy == "cluster" {
							c = redistest.Cluster(t)
						} else {
							c = redistest.Standalone(t)
						}
						stores = append(stores, newStore(t, c, redisstore.Config{Prefix: prefix}))
					}
					var admitted, errs atomic.Int64
					var wg sync.WaitGroup
					for i, s := range stores {
						for g := range 32 {
							wg.Go(func() {
								for k := range 30 {
									if skew && g == 0 && k%5 == 0 {
										redisstore.SkewLocalClock(s, time.Duration((k%3)-1)*time.Duration(i+1)*10*time.Second)
									}
									d, err := s.Take(ctx, sluice.Request{Key: "hot", Limit: tc.lim, Cost: 1})
									if err != nil {
										errs.Add(1)
										continue
									}
									if d.Allowed {
										admitted.Add(1)
									}
								}
							})
						}
					}
					wg.Wait()
					if errs.Load() != 0 {
						t.Fatalf("%d errors", errs.Load())
					}
					if got := admitted.Load(); got != tc.bound {
						t.Fatalf("3 instances admitted %d, want exactly %d", got, tc.bound)
					}
				})
			}
		}
	}
}

// TestManyInstancesCompositeBound: three instances with 32 goroutines each
// send composite checks (a global limit of 300, a limit of 100 per user
// over 5 users, and a fixed window that never binds) until far more have
// been tried than can pass. All-or-nothing means the global limit admits
// exactly 300 checks, no user more than 100, and every limit ends charged
// by exactly the checks admitted: a refused check charges nothing. On a
// standalone server and on the cluster with one Slot, each check is one
// script; on the cluster with its keys spread over slots, parts are
// charged per slot and refunded when another refuses, which may refuse a
// check that would have passed (so fewer than 300 may pass there) but
// must never admit one that should not, and must leave every charge
// refunded.
func TestManyInstancesCompositeBound(t *testing.T) {
	global := sluice.GCRA(sluice.PerHour(1), 300)
	perUser := sluice.GCRA(sluice.PerHour(1), 100)
	route := sluice.FixedWindow(1<<20, time.Hour)
	const users = 5
	for _, mode := range []string{"standalone", "cluster-one-slot", "cluster-spread"} {
		t.Run(mode, func(t *testing.T) {
			prefix := redistest.Prefix(t)
			cfg := redisstore.Config{Prefix: prefix}
			slot := "" // the whole key: spread over the cluster
			if mode == "cluster-one-slot" {
				cfg.Slots, slot = true, "orders"
			}
			var stores []*redisstore.Store
			for range 3 {
				var c redisstore.Client = redistest.Standalone(t)
				if mode != "standalone" {
					c = redistest.Cluster(t)
				}
				stores = append(stores, newStore(t, c, cfg))
			}
			check := func(user int) []sluice.Request {
				return []sluice.Request{
					{Key: "global", Slot: slot, Limit: global, Cost: 1},
					{Key: fmt.Sprintf("user:%d", user), Slot: slot, Limit: perUser, Cost: 1},
					{Key: "route:/orders", Slot: slot, Limit: route, Cost: 1},
				}
			}
			var admitted [users]atomic.Int64
			var errs atomic.Int64
			var wg sync.WaitGroup
			for i, s := range stores {
				for g := range 32 {
					wg.Go(func() {
						ds := make([]sluice.Decision, 3)
						for k := range 25 {
							user := (i*32 + g + k) % users
							if err := s.TakeAll(ctx, check(user), ds); err != nil {
								errs.Add(1)
								continue
							}
							if ds[0].Allowed != ds[1].Allowed || ds[1].Allowed != ds[2].Allowed {
								t.Errorf("check for user %d split: %+v", user, ds)
							}
							if ds[0].Allowed {
								admitted[user].Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			if errs.Load() != 0 {
				t.Fatalf("%d errors", errs.Load())
			}
			var total int64
			peek := stores[0]
			for u := range users {
				n := admitted[u].Load()
				total += n
				if n > 100 {
					t.Errorf("user %d: %d checks admitted, bound 100", u, n)
				}
				d, err := peek.Take(ctx, sluice.Request{Key: fmt.Sprintf("user:%d", u), Slot: slot, Limit: perUser})
				if err != nil || d.Remaining != 100-n {
					t.Errorf("user %d: %d admitted, so %d should remain; the store says %+v %v", u, n, 100-n, d, err)
				}
			}
			d, err := peek.Take(ctx, sluice.Request{Key: "global", Slot: slot, Limit: global})
			if err != nil || d.Remaining != 300-total {
				t.Errorf("global: %d admitted, so %d should remain; the store says %+v %v", total, 300-total, d, err)
			}
			d, err = peek.Take(ctx, sluice.Request{Key: "route:/orders", Slot: slot, Limit: route})
			if err != nil || d.Remaining != 1<<20-total {
				t.Errorf("route: %d admitted, so %d should remain; the store says %+v %v", total, 1<<20-total, d, err)
			}
			switch {
			case total > 300:
				t.Fatalf("%d checks admitted, bound 300", total)
			case total < 300 && mode != "cluster-spread":
				t.Fatalf("%d checks admitted, want exactly 300 (2,400 tried)", total)
			}
			t.Logf("%s: %d of 2,400 checks admitted", mode, total)
		})
	}
}

// TestKeysExpire: after each limit's state is fresh again (plus a second of
// slack), no key of the test's prefix remains.
func TestKeysExpire(t *testing.T) {
	for _, deploy := range []string{"standalone", "cluster"} {
		t.Run(deploy, func(t *testing.T) {
			var c redis.UniversalClient = redistest.Standalone(t)
			if deploy == "cluster" {
				c = redistest.Cluster(t)
			}
			prefix := redistest.Prefix(t)
			s := newStore(t, c, redisstore.Config{Prefix: prefix})
			limits := []sluice.Limit{
				sluice.FixedWindow(5, 200*time.Millisecond), sluice.SlidingLog(5, 200*time.Millisecond),
				sluice.SlidingWindow(5, 100*time.Millisecond), sluice.TokenBucket(sluice.PerSecond(50), 5),
				sluice.GCRA(sluice.PerSecond(50), 5), sluice.LeakyBucket(sluice.PerSecond(50), 4),
				sluice.WarmUp(sluice.PerSecond(50), 100*time.Millisecond), sluice.Concurrency(5, 200*time.Millisecond),
			}
			for _, l := range limits {
				for i := range 3 {
					if _, err := s.Take(ctx, sluice.Request{Key: "user:" + strconv.Itoa(i), Limit: l, Cost: 1}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if keys := redistest.Keys(t, c, prefix); len(keys) < len(limits)*3 {
				t.Fatalf("only %d keys written: %v", len(keys), keys)
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				keys := redistest.Keys(t, c, prefix)
				if len(keys) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d keys left 5s after their states were fresh again, e.g. %q", len(keys), keys[0])
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// TestKeyBuilder: keys that could collide under naive joining stay apart,
// and hostile bytes are safe.
func TestKeyBuilder(t *testing.T) {
	c := redistest.Standalone(t)
	s := newStore(t, c, redisstore.Config{})
	lim := sluice.FixedWindow(1, time.Hour)
	for _, k := range []string{"a:b", "a", "a:b:c", "a}b", "{a", "", "\x00\xff\n", strings.Repeat("x", 1000)} {
		d, err := s.Take(ctx, sluice.Request{Key: k, Limit: lim, Cost: 1})
		if err != nil || !d.Allowed {
			t.Fatalf("key %q: first request %+v %v (collided with another key?)", k, d, err)
		}
	}
}

// TestScriptFlushRecovers: a store sending scripts loads them again after
// SCRIPT FLUSH (as after a restart).
func TestScriptFlushRecovers(t *testing.T) {
	c := redistest.Standalone(t)
	s := newStore(t, c, redisstore.Config{Scripts: true})
	lim := sluice.FixedWindow(10, time.Hour)
	for i := range 3 {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: lim, Cost: 1})
		if err != nil || !d.Allowed || d.Remaining != int64(9-i) {
			t.Fatalf("after SCRIPT FLUSH: %+v %v", d, err)
		}
	}
}

// TestFunctionFlushRecovers: after FUNCTION FLUSH (as after a restart
// without persistence) the store loads its library again, on every master
// of a Cluster, and decides on.
func TestFunctionFlushRecovers(t *testing.T) {
	for _, deploy := range []string{"standalone", "cluster"} {
		t.Run(deploy, func(t *testing.T) {
			var c redis.UniversalClient = redistest.Standalone(t)
			flush := func() error { return c.FunctionFlush(ctx).Err() }
			if deploy == "cluster" {
				cc := redistest.Cluster(t)
				c = cc
				flush = func() error {
					return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.FunctionFlush(ctx).Err() })
				}
			}
			s := newStore(t, c, redisstore.Config{Prefix: redistest.Prefix(t)})
			lim := sluice.FixedWindow(10, time.Hour)
			for i := range 3 {
				if err := flush(); err != nil {
					t.Fatal(err)
				}
				// A check spanning slots on the cluster: several masters.
				rs := []sluice.Request{{Key: "a", Limit: lim, Cost: 1}, {Key: "b", Limit: lim, Cost: 1}, {Key: "c", Limit: lim, Cost: 1}}
				ds := make([]sluice.Decision, len(rs))
				if err := s.TakeAll(ctx, rs, ds); err != nil {
					t.Fatalf("after FUNCTION FLUSH %d: %v", i, err)
				}
				for j, d := range ds {
					if !d.Allowed || d.Remaining != int64(9-i) {
						t.Fatalf("after FUNCTION FLUSH %d, request %d: %+v", i, j, d)
					}
				}
			}
			n, err := c.FunctionList(ctx, redis.FunctionListQuery{}).Result()
			if err != nil || len(n) != 1 || !strings.HasPrefix(n[0].Name, "sluice_") {
				t.Fatalf("libraries on the server: %+v %v", n, err)
			}
		})
	}
}

// TestScriptsWithoutFunctions: a user whose ACL denies FCALL and FUNCTION
// (as a server without functions refuses them) gets the same decisions:
// the store turns to scripts by itself.
func TestScriptsWithoutFunctions(t *testing.T) {
	admin := redistest.Standalone(t)
	user := "sluice-nofn-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-fcall", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	opt := admin.Options()
	opt.Username, opt.Password = user, "pw"
	c := redis.NewClient(opt)
	defer c.Close()
	s := newStore(t, c, redisstore.Config{Prefix: redistest.Prefix(t)})
	lim := sluice.GCRA(sluice.PerSecond(1), 3)
	for i := range 4 {
		d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: lim, Cost: 1})
		if err != nil || d.Allowed != (i < 3) {
			t.Fatalf("call %d: %+v %v", i, d, err)
		}
	}
}

func TestErrorsNameTheRequest(t *testing.T) {
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer dead.Close()
	s := newStore(t, dead, redisstore.Config{})
	_, err := s.Take(ctx, sluice.Request{Key: "user:7", Limit: sluice.GCRA(sluice.PerSecond(5), 5), Cost: 1})
	if err == nil || !strings.Contains(err.Error(), `redisstore: take "user:7" under gcra(5/s, burst 5):`) {
		t.Fatalf("got %v", err)
	}
	if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: sluice.GCRA(sluice.PerSecond(5), 5), Cost: 6}); !errors.Is(err, sluice.ErrCostExceedsCapacity) {
		t.Fatalf("cost above capacity: %v", err)
	}
	if _, err := redisstore.New(dead, redisstore.Config{Prefix: "a{b"}); err == nil {
		t.Fatal("a prefix with a brace was accepted")
	}
}

// TestNearCache: a refused key is answered locally until its RetryAfter,
// without a Redis command, then asked again.
func TestNearCache(t *testing.T) {
	c := redistest.OwnStandalone(t) // commandstats counts every client's scripts
	s := newStore(t, c, redisstore.Config{})
	// A sliding log refuses the third request for a whole second (a fixed
	// window's refusal could end a moment later, at its boundary, before
	// the retries below are done).
	lim := sluice.SlidingLog(2, time.Second)
	for range 2 {
		s.Take(ctx, sluice.Request{Key: "storm", Limit: lim, Cost: 1})
	}
	d, _ := s.Take(ctx, sluice.Request{Key: "storm", Limit: lim, Cost: 1})
	if d.Allowed {
		t.Fatal("third request admitted")
	}
	before := scriptCalls(t, c)
	for range 1000 {
		d, err := s.Take(ctx, sluice.Request{Key: "storm", Limit: lim, Cost: 1})
		if err != nil || d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("near cache answer: %+v %v", d, err)
		}
	}
	if n := scriptCalls(t, c) - before; n != 0 {
		t.Fatalf("1000 retries of a refused key cost %d script calls, want 0", n)
	}
	// A peek always asks Redis, and so does the key once RetryAfter passed.
	if _, err := s.Take(ctx, sluice.Request{Key: "storm", Limit: lim, Cost: 0}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d.RetryAfter + 10*time.Millisecond)
	if d, _ := s.Take(ctx, sluice.Request{Key: "storm", Limit: lim, Cost: 1}); !d.Allowed {
		t.Fatalf("after RetryAfter: %+v", d)
	}
}

// scriptCalls reads how many scripts and functions the server has run
// (EVAL, EVALSHA, FCALL: sluice calls functions where the server has them).
func scriptCalls(t *testing.T, c *redis.Client) int64 {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"eval", "evalsha", "fcall"} {
			if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
				k, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				n += k
			}
		}
	}
	if n == 0 {
		t.Fatal("the server has run no script or function: commandstats cannot show the near cache at work")
	}
	return n
}

func TestWaitOnRedis(t *testing.T) {
	s := newStore(t, redistest.Standalone(t), redisstore.Config{})
	l := sluice.New(s)
	lim := sluice.TokenBucket(sluice.PerSecond(20), 1)
	start := time.Now()
	for range 5 {
		if _, err := l.Wait(ctx, "w", lim); err != nil {
			t.Fatal(err)
		}
	}
	if el := time.Since(start); el < 195*time.Millisecond || el > 2*time.Second {
		t.Fatalf("5 waits at 20/s took %s, want about 200ms", el)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := l.Wait(short, "w", lim); !errors.Is(err, sluice.ErrWouldExceedDeadline) {
		t.Fatalf("wait beyond the deadline: %v", err)
	}
}

// TestCheckOnClusterSlots: with Config.Slots and every dimension of a route
// given the route as its Slot, a composite check is one atomic script on
// the cluster.
func TestCheckOnClusterSlots(t *testing.T) {
	c := redistest.Cluster(t)
	s := newStore(t, c, redisstore.Config{Slots: true})
	l := sluice.New(s)
	global := sluice.TokenBucket(sluice.PerHour(1), 3)
	perUser := sluice.FixedWindow(1, time.Hour)
	for i, want := range []bool{true, false, true, true, false} {
		user := []string{"ann", "ann", "bob", "cy", "dee"}[i]
		check := []sluice.Request{
			{Key: "POST /orders|global", Slot: "POST /orders", Limit: global, Cost: 1},
			{Key: "POST /orders|user:" + user, Slot: "POST /orders", Limit: perUser, Cost: 1}}
		if !redisstore.SameSlot(s, check) {
			t.Fatalf("check %d: its keys span slots", i)
		}
		d, err := l.Check(ctx, check...)
		if err != nil || d.Allowed != want {
			t.Fatalf("check %d (%s): %+v %v, want allowed=%v", i, user, d, err, want)
		}
	}
}

// TestLargeCheck: checks of 2 to 100 requests on a standalone server, each
// one script (chain in check.lua decides up to 64 plain requests, larger
// checks go through tables): all admitted while every limit has room; once
// one request's limit is spent, the check is refused and no other limit is
// charged.
func TestLargeCheck(t *testing.T) {
	s := newStore(t, redistest.Standalone(t), redisstore.Config{})
	for _, n := range []int{2, 63, 64, 65, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rs := make([]sluice.Request, n)
			for i := range rs {
				rs[i] = sluice.Request{Key: fmt.Sprintf("n%d:k%d", n, i), Limit: sluice.GCRA(sluice.PerHour(1), int64(2+i%3)), Cost: 1}
			}
			ds := make([]sluice.Decision, n)
			if err := s.TakeAll(ctx, rs, ds); err != nil {
				t.Fatal(err)
			}
			for i, d := range ds {
				if !d.Allowed || d.Remaining != int64(1+i%3) {
					t.Fatalf("first check, request %d: %+v", i, d)
				}
			}
			// spend the last request's limit alone, then check all again
			last := rs[n-1]
			for {
				d, err := s.Take(ctx, last)
				if err != nil {
					t.Fatal(err)
				}
				if d.Remaining == 0 {
					break
				}
			}
			if err := s.TakeAll(ctx, rs, ds); err != nil {
				t.Fatal(err)
			}
			for i, d := range ds {
				if d.Allowed {
					t.Fatalf("second check, request %d admitted though request %d's limit is spent: %+v", i, n-1, d)
				}
			}
			for i, r := range rs[:n-1] {
				r.Cost = 0
				d, err := s.Take(ctx, r)
				if err != nil || d.Remaining != int64(1+i%3) {
					t.Fatalf("request %d after the refused check: %+v %v, want %d remaining (charged once)", i, d, err, 1+i%3)
				}
			}
		})
	}
}

// TestCorruptStateIsAnError: a state field that is not a number (sluice
// never writes one; another writer might) fails the call, naming the
// request, instead of reading as a fresh state that would admit a burst.
func TestCorruptStateIsAnError(t *testing.T) {
	c, prefix := redistest.Standalone(t), redistest.Prefix(t)
	s := newStore(t, c, redisstore.Config{Prefix: prefix})
	lim := sluice.GCRA(sluice.PerHour(1), 2)
	r := sluice.Request{Key: "user:7", Limit: lim, Cost: 1}
	if d, err := s.Take(ctx, r); err != nil || !d.Allowed {
		t.Fatalf("first take: %+v %v", d, err)
	}
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys: %v %v", keys, err)
	}
	if err := c.HSet(ctx, keys[0], "x", "not a number").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = s.Take(ctx, r)
	if err == nil || !strings.Contains(err.Error(), `redisstore: take "user:7" under gcra(`) ||
		!strings.Contains(err.Error(), "not a number") {
		t.Fatalf("take on a corrupt state: %v", err)
	}
	t.Log(err)
}

func TestClosed(t *testing.T) {
	s, err := redisstore.New(redistest.Standalone(t), redisstore.Config{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: sluice.FixedWindow(1, time.Second), Cost: 1}); !errors.Is(err, sluice.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}
