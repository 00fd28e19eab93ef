package sluiceclient

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/deadline"
	"github.com/sluicehq/sluice/memstore"
)

// PacerConfig configures a Pacer. The zero value paces only by what the
// server says: no fixed rate.
type PacerConfig struct {
	// Rate, if set, spaces attempts to at most Rate.Count per Rate.Period,
	// one interval apart (sluice's leaky bucket as a shaper). Default: no
	// fixed rate.
	Rate sluice.Rate

	// Burst is how many attempts may start at once, without spacing, after
	// the pacer has been idle. Default 0 (the same as 1): every attempt after
	// the first waits its interval.
	Burst int64

	// Queue bounds how many attempts may hold a turn under Rate at once;
	// further ones wait for a place to open, or fail at once if their
	// deadline would pass first. Default 1000.
	Queue int64

	// IgnoreServer stops the pacer from following the server: by default
	// it reads the RateLimit header field of every response
	// (draft-ietf-httpapi-ratelimit-headers-11) and spreads what remains of
	// the binding quota (r) over the time to its reset (t), holds every
	// attempt until the reset when nothing remains, and holds them for a
	// refusal's Retry-After or gRPC RetryInfo.
	IgnoreServer bool
}

// Pacer spaces outgoing attempts: to a configured rate, on sluice's own
// Limiter (a leaky bucket over a memstore, Limiter.Wait), and to the pace the
// server's RateLimit fields allow. Attempts held until a server's reset
// start together when it comes, unless a Rate spaces them. Give it to Config.Pacer; a Pacer may be
// shared by several Clients that call the same server. It is safe for
// concurrent use and starts no goroutines.
type Pacer struct {
	limiter *sluice.Limiter // nil: no fixed rate
	limit   sluice.Limit
	follow  bool

	mu       sync.Mutex
	next     time.Time     // no attempt starts before this (server's pace)
	interval time.Duration // spacing the server's quota allows...
	until    time.Time     // ...until its reset
}

// NewPacer returns a Pacer configured by cfg, or a *ConfigError.
func NewPacer(cfg PacerConfig) (*Pacer, error) {
	p := &Pacer{follow: !cfg.IgnoreServer}
	if cfg.Burst < 0 || cfg.Queue < 0 {
		return nil, &ConfigError{"PacerConfig.Burst/Queue", fmt.Sprint(cfg.Burst, "/", cfg.Queue), "must not be negative"}
	}
	if cfg.Rate == (sluice.Rate{}) {
		return p, nil
	}
	queue := cfg.Queue
	if queue == 0 {
		queue = 1000
	}
	p.limit = sluice.LeakyBucket(cfg.Rate, queue+cfg.Burst).WithNoDelay(max(cfg.Burst-1, 0))
	if err := p.limit.Validate(); err != nil {
		return nil, &ConfigError{"PacerConfig.Rate", cfg.Rate.String(), err.Error()}
	}
	store, err := memstore.New(memstore.Config{MaxKeys: 16, SweepInterval: -1, Resolution: -1}) // one key, exact times, no goroutine: nothing to close
	if err != nil {
		return nil, fmt.Errorf("sluiceclient: pacer store: %w", err)
	}
	p.limiter = sluice.New(store)
	return p, nil
}

// Wait blocks until the next attempt may start. It returns an error
// wrapping sluice.ErrWouldExceedDeadline at once, without waiting, when the
// turn would come after ctx's deadline, and ctx.Err() if ctx is done first.
func (p *Pacer) Wait(ctx context.Context) error {
	if p.limiter != nil {
		if _, err := p.limiter.Wait(ctx, "pace", p.limit); err != nil {
			return fmt.Errorf("sluiceclient: pacer at %s: %w", p.limit, err)
		}
	}
	if !p.follow {
		return nil
	}
	p.mu.Lock()
	now := time.Now()
	slot := now
	if p.next.After(now) {
		slot = p.next
	}
	if deadline, ok := ctx.Deadline(); ok && slot.After(now) && !slot.Before(deadline) {
		p.mu.Unlock()
		return fmt.Errorf("sluiceclient: the server's rate limit allows the next request in %s: %w",
			slot.Sub(now), sluice.ErrWouldExceedDeadline)
	}
	if slot.Before(p.until) {
		p.next = slot.Add(p.interval)
	}
	p.mu.Unlock()
	return deadline.Sleep(ctx, slot.Sub(now))
}

// observe learns the server's pace from a response's header fields.
func (p *Pacer) observe(h http.Header, now time.Time) {
	if p == nil || !p.follow {
		return
	}
	if q, ok := rateLimit(h); ok {
		if q.remaining == 0 {
			p.hold(now.Add(q.reset))
		} else {
			p.pace(q.reset/time.Duration(q.remaining), now.Add(q.reset))
		}
	}
	if d, ok := retryAfter(h, now); ok {
		p.hold(now.Add(d))
	}
}

// hold keeps every attempt from starting before t.
func (p *Pacer) hold(t time.Time) {
	if p == nil || !p.follow {
		return
	}
	p.mu.Lock()
	if t.After(p.next) {
		p.next = t
	}
	p.mu.Unlock()
}

// pace spaces attempts interval apart until the time until.
func (p *Pacer) pace(interval time.Duration, until time.Time) {
	p.mu.Lock()
	p.interval, p.until = interval, until
	p.mu.Unlock()
}
