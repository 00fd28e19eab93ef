// Package bench compares sluice's in-memory store with other Go rate
// limiting libraries. Each library is wrapped in the same small interface,
// configured with an equivalent limit, and driven by the benchmarks in
// bench_test.go within one `go test -bench` run; see RESULTS.md.
//
// It is a separate module so that the peers stay out of sluice's go.mod.
package bench

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/go-chi/httprate"
	sethvargo "github.com/sethvargo/go-limiter"
	sethvargomem "github.com/sethvargo/go-limiter/memorystore"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// policy is the limit every library is configured with for a benchmark.
type policy int

const (
	// generous admits every call a benchmark can make: a token bucket of
	// 1e9 tokens refilled at 1e9/s, or a window of 2^30 requests per hour.
	generous policy = iota
	// strict admits one request per key per hour: once a key has been used,
	// every further call is refused.
	strict
)

// Parameters of the two policies.
const (
	bucketRate  = 1_000_000_000 // tokens per second, generous token buckets
	bucketBurst = 1_000_000_000 // capacity, generous token buckets
	windowCount = 1 << 30       // requests per window, generous windows
	window      = time.Hour     // window and refill period of every strict limit
)

// limiter is one library's keyed limiter, configured with a single limit and
// reduced to a decision per call.
type limiter interface {
	// Allow charges one request to key and reports whether it was admitted.
	// An error is not a decision.
	Allow(ctx context.Context, key string) (bool, error)
	// Close releases the limiter's background goroutines, if any.
	Close() error
}

// library names a rate limiting library and builds its limiter.
type library struct {
	name string
	// new returns a limiter for p that holds at least maxKeys keys without
	// evicting any.
	new func(p policy, maxKeys int) (limiter, error)
}

// libraries lists what the benchmarks compare: sluice's token bucket first,
// then the peers, then sluice's window algorithms.
var libraries = []library{
	{"sluice", newSluiceTokenBucket},
	{"xtime", newXTime},
	{"sethvargo", newSethvargo},
	{"ulule", newUlule},
	{"httprate", newHTTPRate},
	{"throttled", newThrottled},
	{"sluice-fixed", newSluiceFixedWindow},
	{"sluice-sliding", newSluiceSlidingWindow},
	{"sluice-exact", newSluiceExact},
}

// sluiceLimiter calls sluice.Limiter.Allow on a memstore.Store, as users do.
type sluiceLimiter struct {
	store *memstore.Store
	lim   *sluice.Limiter
	limit sluice.Limit
}

// newSluice returns a limiter for limit on a memstore configured by cfg.
func newSluice(limit sluice.Limit, cfg memstore.Config) (*sluiceLimiter, error) {
	if err := limit.Validate(); err != nil {
		return nil, err
	}
	store, err := memstore.New(cfg)
	if err != nil {
		return nil, err
	}
	return &sluiceLimiter{store: store, lim: sluice.New(store), limit: limit}, nil
}

func (l *sluiceLimiter) Allow(ctx context.Context, key string) (bool, error) {
	d, err := l.lim.Allow(ctx, key, l.limit)
	return d.Allowed, err
}

func (l *sluiceLimiter) Close() error { return l.store.Close() }

func newSluiceTokenBucket(p policy, maxKeys int) (limiter, error) {
	limit := sluice.TokenBucket(sluice.PerSecond(bucketRate), bucketBurst)
	if p == strict {
		limit = sluice.TokenBucket(sluice.Per(1, window), 1)
	}
	return newSluice(limit, memstore.Config{MaxKeys: maxKeys})
}

// newSluiceExact is sluice's token bucket on a memstore that reads the
// clock on every decision (memstore.Config.Resolution -1) instead of the
// default coarse clock, read once per millisecond.
func newSluiceExact(p policy, maxKeys int) (limiter, error) {
	limit := sluice.TokenBucket(sluice.PerSecond(bucketRate), bucketBurst)
	if p == strict {
		limit = sluice.TokenBucket(sluice.Per(1, window), 1)
	}
	return newSluice(limit, memstore.Config{MaxKeys: maxKeys, Resolution: -1})
}

func newSluiceFixedWindow(p policy, maxKeys int) (limiter, error) {
	return newSluice(sluice.FixedWindow(windowLimit(p), window), memstore.Config{MaxKeys: maxKeys})
}

func newSluiceSlidingWindow(p policy, maxKeys int) (limiter, error) {
	return newSluice(sluice.SlidingWindow(windowLimit(p), window), memstore.Config{MaxKeys: maxKeys})
}

// windowLimit is the number of requests per window under p.
func windowLimit(p policy) int64 {
	if p == strict {
		return 1
	}
	return windowCount
}

// xtimeLimiter keeps one *rate.Limiter per key in a sync.Map, the usual way
// of keying golang.org/x/time/rate: Load, and LoadOrStore on a miss so that
// a limiter is only allocated for a new key.
type xtimeLimiter struct {
	limiters sync.Map // key -> *rate.Limiter
	limit    rate.Limit
	burst    int
}

func newXTime(p policy, _ int) (limiter, error) {
	if p == strict {
		return &xtimeLimiter{limit: rate.Every(window), burst: 1}, nil
	}
	return &xtimeLimiter{limit: bucketRate, burst: bucketBurst}, nil
}

func (l *xtimeLimiter) Allow(_ context.Context, key string) (bool, error) {
	v, ok := l.limiters.Load(key)
	if !ok {
		v, _ = l.limiters.LoadOrStore(key, rate.NewLimiter(l.limit, l.burst))
	}
	return v.(*rate.Limiter).Allow(), nil
}

func (l *xtimeLimiter) Close() error { return nil }

// sethvargoLimiter calls Take on a go-limiter memorystore, whose buckets
// refill all at once at each interval (a fixed window per key).
type sethvargoLimiter struct {
	store sethvargo.Store
}

func newSethvargo(p policy, _ int) (limiter, error) {
	tokens := uint64(windowCount)
	if p == strict {
		tokens = 1
	}
	store, err := sethvargomem.New(&sethvargomem.Config{Tokens: tokens, Interval: window})
	if err != nil {
		return nil, err
	}
	return &sethvargoLimiter{store: store}, nil
}

func (l *sethvargoLimiter) Allow(ctx context.Context, key string) (bool, error) {
	_, _, _, ok, err := l.store.Take(ctx, key)
	return ok, err
}

func (l *sethvargoLimiter) Close() error { return l.store.Close(context.Background()) }

// ululeLimiter calls Get on a ulule limiter with the memory store (a fixed
// window per key, starting at the key's first request).
type ululeLimiter struct {
	lim *ulule.Limiter
}

func newUlule(p policy, _ int) (limiter, error) {
	r := ulule.Rate{Period: window, Limit: windowLimit(p)}
	return &ululeLimiter{lim: ulule.New(ululemem.NewStore(), r)}, nil
}

func (l *ululeLimiter) Allow(ctx context.Context, key string) (bool, error) {
	c, err := l.lim.Get(ctx, key)
	return err == nil && !c.Reached, err
}

// Close does nothing: the memory store stops its cleaner goroutine from a
// finalizer once the store is unreachable.
func (l *ululeLimiter) Close() error { return nil }

// httprateLimiter is the decision of httprate.RateLimiter.OnLimit (v0.16.1)
// on its local counter, reproduced with the public LimitCounter API and
// without the HTTP response headers OnLimit also sets: under one limiter-wide
// mutex it reads the current and previous windows' counts, weights the
// previous one by the part of it the sliding window still covers, refuses if
// the rounded estimate plus one exceeds the limit, and otherwise increments
// the current window. Windows are aligned to the limiter's creation, as
// httprate does for its local counter.
type httprateLimiter struct {
	mu      sync.Mutex
	counter httprate.LimitCounter
	limit   int
	length  time.Duration
	offset  time.Duration
}

func newHTTPRate(p policy, _ int) (limiter, error) {
	start := time.Now().UTC()
	return &httprateLimiter{
		counter: httprate.NewLocalLimitCounter(window),
		limit:   int(windowLimit(p)),
		length:  window,
		offset:  start.Sub(start.Truncate(window)),
	}, nil
}

func (l *httprateLimiter) currentWindow(t time.Time) time.Time {
	return t.Add(-l.offset).Truncate(l.length).Add(l.offset)
}

func (l *httprateLimiter) Allow(_ context.Context, key string) (bool, error) {
	currentWindow := l.currentWindow(time.Now().UTC())

	l.mu.Lock()
	// calculateRate reads the clock again, as httprate does.
	now := time.Now().UTC()
	current := l.currentWindow(now)
	currCount, prevCount, err := l.counter.Get(key, current, current.Add(-l.length))
	if err != nil {
		l.mu.Unlock()
		return false, err
	}
	diff := now.Sub(current)
	estimate := float64(prevCount)*(float64(l.length)-float64(diff))/float64(l.length) + float64(currCount)
	if int(math.Round(estimate))+1 > l.limit {
		l.mu.Unlock()
		return false, nil
	}
	err = l.counter.IncrementBy(key, currentWindow, 1)
	l.mu.Unlock()
	return err == nil, err
}

func (l *httprateLimiter) Close() error { return nil }

// throttledLimiter calls RateLimitCtx on a throttled GCRA limiter with its
// memstore (an LRU bounded to maxKeys).
type throttledLimiter struct {
	lim *throttled.GCRARateLimiterCtx
}

func newThrottled(p policy, maxKeys int) (limiter, error) {
	store, err := throttledmem.NewCtx(maxKeys)
	if err != nil {
		return nil, err
	}
	quota := throttled.RateQuota{MaxRate: throttled.PerSec(bucketRate), MaxBurst: bucketBurst}
	if p == strict {
		// A burst of 0 admits one request, then one per hour.
		quota = throttled.RateQuota{MaxRate: throttled.PerDuration(1, window), MaxBurst: 0}
	}
	lim, err := throttled.NewGCRARateLimiterCtx(store, quota)
	if err != nil {
		return nil, err
	}
	return &throttledLimiter{lim: lim}, nil
}

func (l *throttledLimiter) Allow(ctx context.Context, key string) (bool, error) {
	limited, _, err := l.lim.RateLimitCtx(ctx, key, 1)
	return err == nil && !limited, err
}

func (l *throttledLimiter) Close() error { return nil }
