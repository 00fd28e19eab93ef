package sluiceclient

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/httpname"
)

// Config configures a Client. The zero value is ready to use: up to 3
// retries of safe requests refused with 429 or 503, exponential backoff
// with full jitter from 500ms, a retry budget of 10% of recent requests
// plus 3 retries per 10 s, no adaptive throttling and no pacing. Each field
// documents its default.
type Config struct {
	// Base sends the requests of the HTTP transport. Default
	// http.DefaultTransport.
	Base http.RoundTripper

	// MaxRetries is the number of retries of one request after its first
	// attempt. Default 3; negative: never retry.
	MaxRetries int

	// BaseBackoff is the backoff before the first retry: a retry waits a
	// uniformly random time in [0, min(MaxBackoff, BaseBackoff·2ⁿ)) after
	// attempt n (full jitter), on top of any wait the server asked for.
	// Default 500ms.
	BaseBackoff time.Duration

	// MaxBackoff caps the exponential backoff. Default 30s.
	MaxBackoff time.Duration

	// MaxRetryAfter is the longest wait a server may ask for (Retry-After,
	// a RateLimit reset, a gRPC RetryInfo) that the client will sit out
	// before retrying; a longer one returns the server's answer at once.
	// Default 60s. The request's context deadline bounds every wait as
	// well: a wait that would outlast it is never started.
	MaxRetryAfter time.Duration

	// BudgetRatio is the retry budget: retries may be at most this
	// fraction of the requests made in the last BudgetWindow, plus
	// BudgetFloor, so that a client cannot multiply a server's load by
	// more than 1 + BudgetRatio however many retries each request may
	// have. Default 0.1; negative: no retries beyond the floor.
	BudgetRatio float64

	// BudgetFloor is the number of retries allowed in each BudgetWindow
	// whatever the ratio, so that a client making few requests can still
	// retry. Default 3, enough for one request's default retries. The
	// floor is per Client: many clients that each send little add theirs
	// up in a storm (docs/client.md measures it), so keep it small.
	// Negative: none.
	BudgetFloor int

	// BudgetWindow is how long a request counts toward the budget.
	// Default 10s.
	BudgetWindow time.Duration

	// ThrottleK turns on client-side adaptive throttling (Google SRE book,
	// "Handling Overload"): each attempt is rejected locally, without
	// reaching the server, with probability
	// max(0, (requests − K·accepts) / (requests + 1)) over the last
	// ThrottleWindow, where accepts are the attempts the server did not
	// refuse with 429 or 503 (RESOURCE_EXHAUSTED or UNAVAILABLE for gRPC).
	// Lower K rejects sooner; 2 is the book's choice. A rejected attempt
	// returns ErrThrottled. Default 0: off. Values in (0, 1) are refused:
	// they would reject requests a healthy server would accept.
	ThrottleK float64

	// ThrottleWindow is the history adaptive throttling counts over.
	// Default 2 minutes.
	ThrottleWindow time.Duration

	// IdempotencyKeyHeader names the request header whose presence makes
	// a request safe to retry whatever its method (for gRPC, the metadata
	// key, in lower case). Default "Idempotency-Key".
	IdempotencyKeyHeader string

	// Pacer, if set, spaces out every attempt (first tries and retries)
	// and learns from the server's RateLimit header fields and RetryInfo.
	// Default nil: no pacing.
	Pacer *Pacer
}

// ConfigError says which Config or PacerConfig field is wrong and why.
type ConfigError struct {
	Field  string // "BudgetRatio"
	Value  string // the value given, printed
	Reason string // what the value must be
}

// Error returns "sluiceclient: Config.Field = Value: Reason".
func (e *ConfigError) Error() string {
	return fmt.Sprintf("sluiceclient: %s = %s: %s", e.Field, e.Value, e.Reason)
}

// settings is a Config with its defaults applied and validated.
type settings struct {
	Config
	retries int
}

// withDefaults validates c and fills in its defaults.
func (c Config) withDefaults() (settings, error) {
	if err := c.validate(); err != nil {
		return settings{}, err
	}
	s := settings{Config: c, retries: c.MaxRetries}
	if c.Base == nil {
		s.Base = http.DefaultTransport
	}
	if c.MaxRetries == 0 {
		s.retries = 3
	}
	s.BaseBackoff = orDefault(c.BaseBackoff, 500*time.Millisecond)
	s.MaxBackoff = orDefault(c.MaxBackoff, 30*time.Second)
	s.MaxRetryAfter = orDefault(c.MaxRetryAfter, 60*time.Second)
	s.BudgetWindow = orDefault(c.BudgetWindow, 10*time.Second)
	s.ThrottleWindow = orDefault(c.ThrottleWindow, 2*time.Minute)
	if c.BudgetRatio == 0 {
		s.BudgetRatio = 0.1
	}
	if c.BudgetFloor == 0 {
		s.BudgetFloor = 3
	}
	if c.IdempotencyKeyHeader == "" {
		s.IdempotencyKeyHeader = "Idempotency-Key"
	}
	return s, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// validate refuses the values that make no sense.
func (c Config) validate() error {
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"Config.BaseBackoff", c.BaseBackoff}, {"Config.MaxBackoff", c.MaxBackoff},
		{"Config.MaxRetryAfter", c.MaxRetryAfter}, {"Config.BudgetWindow", c.BudgetWindow},
		{"Config.ThrottleWindow", c.ThrottleWindow},
	} {
		if d.v < 0 {
			return &ConfigError{d.field, d.v.String(), "must not be negative (0 means the default)"}
		}
	}
	if math.IsNaN(c.BudgetRatio) || math.IsInf(c.BudgetRatio, 0) || c.BudgetRatio > 1 {
		return &ConfigError{"Config.BudgetRatio", fmt.Sprint(c.BudgetRatio),
			"must be at most 1 (one retry per request); 0.1 is the default"}
	}
	if k := c.ThrottleK; math.IsNaN(k) || math.IsInf(k, 0) || k < 0 || k > 0 && k < 1 {
		return &ConfigError{"Config.ThrottleK", fmt.Sprint(k),
			"must be 0 (off) or at least 1; 2 is the usual choice"}
	}
	if c.IdempotencyKeyHeader != "" && !httpname.Valid(c.IdempotencyKeyHeader) {
		return &ConfigError{"Config.IdempotencyKeyHeader", fmt.Sprintf("%q", c.IdempotencyKeyHeader),
			"must be a header field name (1 to 128 letters, digits and !#$%&'*+-.^_`|~)"}
	}
	return nil
}
