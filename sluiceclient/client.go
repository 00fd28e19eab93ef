package sluiceclient

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// ErrThrottled is returned for an attempt that adaptive throttling
// (Config.ThrottleK) rejected locally, without sending it: the server has
// refused most recent requests. Retry later, after the server recovers; a
// larger ThrottleK rejects less.
var ErrThrottled = errors.New("sluiceclient: rejected locally by adaptive throttling: the server refused most recent requests; retry later")

// Client retries requests a rate limited server refused, politely: it
// honours the server's Retry-After, RateLimit fields or gRPC RetryInfo,
// backs off exponentially with full jitter, never waits past the request's
// deadline, and spends at most a budget of retries, so that many clients
// refused at once do not come back all at once, nor multiply the load.
//
// A Client is an http.RoundTripper (use it as an http.Client's Transport)
// and gives gRPC client interceptors (UnaryClientInterceptor,
// StreamClientInterceptor). Everything made from one Client shares its
// retry budget, its adaptive throttling and its Pacer. It is safe for
// concurrent use.
type Client struct {
	s        settings
	budget   *budget
	throttle *throttle // nil: off
	jitter   func() float64
	streams  *Pacer // holds new gRPC streams after a refusal: Config.Pacer, or one of its own
}

// New returns a Client configured by cfg, or a *ConfigError naming the field
// that makes no sense.
func New(cfg Config) (*Client, error) {
	s, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Client{s: s, budget: newBudget(s), jitter: rand.Float64, streams: s.Pacer}
	if s.Pacer == nil || !s.Pacer.follow {
		c.streams = &Pacer{follow: true}
	}
	if s.ThrottleK > 0 {
		c.throttle = &throttle{k: s.ThrottleK, rand: rand.Float64, w: newWindow(s.ThrottleWindow)}
	}
	return c, nil
}

// backoff returns the full-jitter backoff after attempt n (0 for the first
// attempt): uniform in [0, min(MaxBackoff, BaseBackoff·2ⁿ)).
func (c *Client) backoff(n int) time.Duration {
	ceiling := c.s.MaxBackoff
	if n < 62 && c.s.BaseBackoff <= c.s.MaxBackoff>>n {
		ceiling = c.s.BaseBackoff << n
	}
	return time.Duration(c.jitter() * float64(ceiling))
}

// retryWait decides whether a refused attempt n of a retryable request may
// be retried, and after how long: the wait the server asked for (server, if
// asked) plus a jittered backoff. It refuses when no retries are left, when
// the server asks for more than MaxRetryAfter, or when the wait would
// outlast ctx's deadline. The caller then takes the retry from the budget
// (c.budget.withdraw), last, so that only retries made are charged.
func (c *Client) retryWait(ctx context.Context, n int, server time.Duration) (time.Duration, bool) {
	if n >= c.s.retries || server > c.s.MaxRetryAfter {
		return 0, false
	}
	wait := server + c.backoff(n)
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Add(wait).Before(deadline) {
		return 0, false
	}
	return wait, true
}

// admit applies the Pacer and adaptive throttling to an attempt about to be
// sent.
func (c *Client) admit(ctx context.Context) error {
	if c.s.Pacer != nil {
		if err := c.s.Pacer.Wait(ctx); err != nil {
			return err
		}
	}
	if !c.throttle.admit(time.Now()) {
		return ErrThrottled
	}
	return nil
}
