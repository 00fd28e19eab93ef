//go:build redisbench

// The Redis comparison: sluice's redisstore beside peer Go libraries that
// keep their limits in Redis, all against the same local server. Build tag
// redisbench keeps these files out of the memstore benchmarks; see REDIS.md.
package bench_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"github.com/go-chi/httprate"
	httprateredis "github.com/go-chi/httprate-redis"
	"github.com/go-redis/redis_rate/v10"
	mennanov "github.com/mennanov/limiters"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// redisAddr is the server every case runs against: REDISBENCH_ADDR, by
// default the dedicated benchmark server on 127.0.0.1:6399.
func redisAddr() string {
	if a := os.Getenv("REDISBENCH_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6399"
}

// newClient returns a go-redis client with default options (PoolSize
// 10·GOMAXPROCS, RESP3, no pipelining of its own) but for maintenance
// notifications, off as sluice serve sets them: a connection's setup then
// leaves out a command open-source Redis refuses, and sluice's store may keep
// connections of its own (redisstore's lanes). Every library's client is
// made here, so the option is the same for all.
func newClient() *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     redisAddr(),
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// The limits: generous enough that no benchmark call is ever refused.
const (
	gcraRate    = 1_000_000     // per second, per key (GCRA); burst the same
	windowCount = 1 << 30       // requests per window, per key (windows)
	window      = time.Hour     // window length
	redisPrefix = "rb"          // key prefix of every library
	mennanovEps = 1e-9          // SlidingWindow epsilon (tolerance vs capacity)
	registryTTL = 2 * time.Hour // how long mennanov's registry keeps a key's limiter
)

var (
	sluiceGCRA    = sluice.GCRA(sluice.PerSecond(gcraRate), gcraRate)
	sluiceFixed   = sluice.FixedWindow(windowCount, window)
	sluiceSliding = sluice.SlidingWindow(windowCount, window)
)

// allowFunc decides one request for key: admitted or not.
type allowFunc func(ctx context.Context, key string) (bool, error)

// redisLib is one library configured with one limit, built on a fresh
// client for each benchmark run.
type redisLib struct {
	name string
	// note says what exactly is measured.
	note string
	new  func(rdb *redis.Client) (allowFunc, func(), error)
}

var redisLibs = []redisLib{
	{"sluice-gcra", "redisstore, sluice.GCRA(1e6/s, burst 1e6): one EVALSHA", newSluiceRedis(sluiceGCRA)},
	{"sluice-fixed", "redisstore, sluice.FixedWindow(2^30 per 1h): one EVALSHA", newSluiceRedis(sluiceFixed)},
	{"sluice-sliding", "redisstore, sluice.SlidingWindow(2^30 per 1h): one EVALSHA", newSluiceRedis(sluiceSliding)},
	{"redis_rate-gcra", "redis_rate v10 Allow, PerSecond(1e6) (burst 1e6): one EVALSHA", newRedisRate},
	{"ulule-fixed", "ulule/limiter v3 redis store, 2^30 per 1h: one EVALSHA", newUlule},
	{"mennanov-fixed", "mennanov/limiters FixedWindow + FixedWindowRedis per key via Registry: pipeline INCR+PEXPIRE", newMennanovFixed},
	{"mennanov-sliding", "mennanov/limiters SlidingWindow + SlidingWindowRedis per key via Registry: pipeline INCR+PEXPIRE+GET", newMennanovSliding},
	{"httprate-sliding", "httprate.OnLimit's decision on httprate-redis counter, limiter-wide mutex: MGET, then MULTI/INCRBY/EXPIRE/EXEC", newHTTPRateRedis(true)},
	{"httprate-nolock", "as httprate-sliding without the limiter-wide mutex (NOT what httprate does; the counter's ceiling)", newHTTPRateRedis(false)},
}

// newSluiceRedis: sluice.New(redisstore.New(client, Config{Prefix})).Allow.
func newSluiceRedis(limit sluice.Limit) func(*redis.Client) (allowFunc, func(), error) {
	return func(rdb *redis.Client) (allowFunc, func(), error) {
		return newSluiceStore(rdb, limit, redisstore.Config{Prefix: redisPrefix + ":sluice:"})
	}
}

func newSluiceStore(rdb *redis.Client, limit sluice.Limit, cfg redisstore.Config) (allowFunc, func(), error) {
	store, err := redisstore.New(rdb, cfg)
	if err != nil {
		return nil, nil, err
	}
	lim := sluice.New(store)
	allow := func(ctx context.Context, key string) (bool, error) {
		d, err := lim.Allow(ctx, key, limit)
		return d.Allowed, err
	}
	return allow, func() { store.Close() }, nil
}

// newRedisRate: redis_rate.NewLimiter(rdb).Allow(ctx, key, PerSecond(n)),
// GCRA in Lua on floating-point seconds.
func newRedisRate(rdb *redis.Client) (allowFunc, func(), error) {
	lim := redis_rate.NewLimiter(rdb)
	limit := redis_rate.PerSecond(gcraRate)
	allow := func(ctx context.Context, key string) (bool, error) {
		res, err := lim.Allow(ctx, key, limit)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	}
	return allow, func() {}, nil
}

// newUlule: limiter.New(redis store, rate).Get(ctx, key), a fixed window in
// Lua (INCRBY, then PEXPIRE on a new key or PTTL).
func newUlule(rdb *redis.Client) (allowFunc, func(), error) {
	store, err := ululeredis.NewStoreWithOptions(rdb, ulule.StoreOptions{
		Prefix:   redisPrefix + ":ulule",
		MaxRetry: ulule.DefaultMaxRetry,
	})
	if err != nil {
		return nil, nil, err
	}
	lim := ulule.New(store, ulule.Rate{Period: window, Limit: windowCount})
	allow := func(ctx context.Context, key string) (bool, error) {
		c, err := lim.Get(ctx, key)
		if err != nil {
			return false, err
		}
		return !c.Reached, nil
	}
	return allow, func() {}, nil
}

// mennanov/limiters keeps one limiter object per key; its examples hold
// them in a Registry (GetOrCreate under one mutex, expiring after a TTL),
// as done here. FixedWindow and SlidingWindow are its Redis algorithms that
// need no distributed lock. Each Redis call runs a pipeline (not MULTI) in a
// goroutine of its own.
func newMennanovFixed(rdb *redis.Client) (allowFunc, func(), error) {
	reg := mennanov.NewRegistry()
	clock := mennanov.NewSystemClock()
	allow := func(ctx context.Context, key string) (bool, error) {
		fw := reg.GetOrCreate(key, func() any {
			return mennanov.NewFixedWindow(windowCount, window,
				mennanov.NewFixedWindowRedis(rdb, redisPrefix+":mennanov-fw:"+key), clock)
		}, registryTTL, clock.Now()).(*mennanov.FixedWindow)
		_, err := fw.Limit(ctx)
		return mennanovResult(err)
	}
	return allow, func() {}, nil
}

func newMennanovSliding(rdb *redis.Client) (allowFunc, func(), error) {
	reg := mennanov.NewRegistry()
	clock := mennanov.NewSystemClock()
	allow := func(ctx context.Context, key string) (bool, error) {
		sw := reg.GetOrCreate(key, func() any {
			return mennanov.NewSlidingWindow(windowCount, window,
				mennanov.NewSlidingWindowRedis(rdb, redisPrefix+":mennanov-sw:"+key), clock, mennanovEps)
		}, registryTTL, clock.Now()).(*mennanov.SlidingWindow)
		_, err := sw.Limit(ctx)
		return mennanovResult(err)
	}
	return allow, func() {}, nil
}

func mennanovResult(err error) (bool, error) {
	switch err {
	case nil:
		return true, nil
	case mennanov.ErrLimitExhausted:
		return false, nil
	}
	return false, err
}

// httprateRedis reproduces the decision of httprate.RateLimiter.OnLimit
// (httprate v0.16.1, the version this module selects; v0.15.0, which
// httprate-redis v0.6.0 requires, decides the same way) on the
// httprate-redis v0.6.0 counter, without the HTTP headers OnLimit sets:
//
//   - the current window is time.Now().UTC() truncated to the window length
//     (a custom counter keeps httprate's windows wall-clock aligned);
//   - under the RateLimiter's own mutex (one per limiter, shared by all
//     keys), calculateRate reads the clock again and calls counter.Get for
//     the current and previous windows (one MGET), weights the previous
//     count by the part of it the sliding window still covers, and the
//     request is refused if round(estimate)+1 > limit;
//   - otherwise, still under the mutex, counter.IncrementBy(key, window, 1)
//     runs MULTI/INCRBY/EXPIRE(3·window)/EXEC (one round trip).
//
// So a decision costs two round trips, and with the mutex every decision
// of the limiter is serialised. locked=false drops the mutex: not what
// httprate does, shown only as the counter's own ceiling.
//
// The counter is built with NewCounter(&Config{Client, FallbackDisabled})
// so that a Redis error is reported instead of silently switching to
// httprate's in-memory fallback.
type httprateRedis struct {
	mu      sync.Mutex
	locked  bool
	counter httprate.LimitCounter
	limit   int
	length  time.Duration
}

func newHTTPRateRedis(locked bool) func(*redis.Client) (allowFunc, func(), error) {
	return func(rdb *redis.Client) (allowFunc, func(), error) {
		counter := httprateredis.NewCounter(&httprateredis.Config{
			Client:           rdb,
			PrefixKey:        redisPrefix + ":httprate",
			WindowLength:     window,
			FallbackDisabled: true,
		})
		// NewRateLimiter calls Config(limit, window) on a custom counter.
		counter.Config(windowCount, window)
		h := &httprateRedis{locked: locked, counter: counter, limit: windowCount, length: window}
		return h.allow, func() {}, nil
	}
}

func (h *httprateRedis) allow(_ context.Context, key string) (bool, error) {
	currentWindow := time.Now().UTC().Truncate(h.length)
	if h.locked {
		h.mu.Lock()
		defer h.mu.Unlock()
	}
	now := time.Now().UTC()
	current := now.Truncate(h.length)
	currCount, prevCount, err := h.counter.Get(key, current, current.Add(-h.length))
	if err != nil {
		return false, err
	}
	diff := now.Sub(current)
	estimate := float64(prevCount)*(float64(h.length)-float64(diff))/float64(h.length) + float64(currCount)
	if int(math.Round(estimate))+1 > h.limit {
		return false, nil
	}
	if err := h.counter.IncrementBy(key, currentWindow, 1); err != nil {
		return false, err
	}
	return true, nil
}

// libByName returns the library called name.
func libByName(name string) redisLib {
	for _, l := range redisLibs {
		if l.name == name {
			return l
		}
	}
	panic(fmt.Sprintf("no library %q", name))
}
