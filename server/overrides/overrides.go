// Package overrides keeps sluice serve's runtime overrides: one key's limit
// changed while the server runs (PUT /admin/overrides/{limit}/{key}: a
// scale, no limit, or another limit, for a time), on top of the policy
// file. The overrides are kept in the store, so that every instance applies
// them and they outlive a restart: on Redis, in one hash beside a version
// counter that every change increments; with the memory store, in a file
// of the state directory.
//
// A Service is the policy.Runtime the policy plans with. Its table is an
// immutable snapshot, swapped whole when the kept overrides change:
// planning reads it without a lock. Every instance polls the version every
// Interval (a GET of one small key) and reads the hash again when it
// changed, so a change made through one instance applies on every other
// within Interval plus a round trip. Polling was chosen over keyspace
// notifications or pub/sub because it needs no server configuration
// (notify-keyspace-events), no subscribed connection per instance, works
// the same on a Redis Cluster and behind proxies, and cannot miss a
// change: a missed message would leave an instance wrong until the next
// one, while a missed poll is repaired by the next poll.
//
// Overrides are bounded: at most MaxOverrides, each under MaxEntryBytes of
// JSON, keys of at most MaxKeyBytes.
package overrides

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/policy"
)

// Bounds of what the overrides keep.
const (
	// MaxOverrides is how many overrides the store keeps at most; setting
	// one more is refused (409) until one is deleted or expires.
	MaxOverrides = 10000
	// MaxKeyBytes bounds a key as written in the path.
	MaxKeyBytes = 1024
	// MaxEntryBytes bounds an override's request body and its kept JSON.
	MaxEntryBytes = 4 << 10
	// MaxTTL is the longest ttl an override may have.
	MaxTTL = 366 * 24 * time.Hour
	// DefaultInterval is how often every instance looks for changes.
	DefaultInterval = 250 * time.Millisecond
)

// ErrFull is returned when the store keeps MaxOverrides overrides already.
var ErrFull = errors.New("overrides: full")

// Entry is one override as kept and listed (GET /admin/overrides).
type Entry struct {
	// Limit names the limit of the policy it overrides.
	Limit string `json:"limit"`
	// Key is the key's value as the limit keys it (normalised: an
	// address in the form client addresses take).
	Key string `json:"key"`
	// Scale, Unlimited and Spec are what it does: exactly one is set.
	Scale     float64         `json:"scale,omitempty"`
	Unlimited bool            `json:"unlimited,omitempty"`
	Spec      json.RawMessage `json:"spec,omitempty"` // a limit, as the PUT's "limit" wrote it
	Reason    string          `json:"reason,omitempty"`
	// By says who set it: the admin client's address, and the digest of
	// its token or the subject of its certificate.
	By        string    `json:"by,omitempty"`
	SetAt     time.Time `json:"set_at"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// id names e in the store: its limit and key, length-prefixed.
func (e *Entry) id() string { return entryID(e.Limit, e.Key) }

func entryID(limit, key string) string { return string(decide.AppendKey(nil, limit, key)) }

// expired reports whether e has expired at now.
func (e *Entry) expired(now time.Time) bool { return !e.ExpiresAt.IsZero() && !now.Before(e.ExpiresAt) }

// override is what e does to its limit.
func (e *Entry) override() (policy.RuntimeOverride, error) {
	switch {
	case e.Unlimited:
		return policy.RuntimeOverride{Unlimited: true}, nil
	case e.Scale != 0:
		return policy.RuntimeOverride{Scale: e.Scale}, nil
	case len(e.Spec) > 0:
		lim, err := policy.ParseLimit("override", e.Spec)
		return policy.RuntimeOverride{Limit: lim}, err
	}
	return policy.RuntimeOverride{}, errors.New("neither scale, unlimited nor limit")
}

// Keeper keeps the overrides: in Redis (NewRedis) or a file (NewFile).
type Keeper interface {
	// Version changes whenever the overrides change.
	Version(ctx context.Context) (int64, error)
	// Load returns every override kept and the version they are of.
	Load(ctx context.Context) (entries []Entry, version int64, err error)
	// Put keeps e, replacing the override of its limit and key; ErrFull
	// when MaxOverrides others are kept.
	Put(ctx context.Context, e Entry) error
	// Delete forgets the override of limit and key; found is false when
	// there was none.
	Delete(ctx context.Context, limit, key string) (found bool, err error)
}

// Config configures a Service.
type Config struct {
	// Keeper keeps the overrides. Required.
	Keeper Keeper
	// Policy returns the policy in force, which overrides must name a
	// limit of. Required.
	Policy func() *policy.Policy
	// Named, if set, finds a limit outside the policy that overrides may
	// name (sluice serve: the Envoy rate limit service's rate limits, by
	// their name): the limit its overrides apply to, ok false when there
	// is none. Its keys are taken as written, bounded by
	// decide.KeyValue. Default none.
	Named func(name string) (lim sluice.Limit, ok bool)
	// Logger receives one line per change. Default slog.Default().
	Logger *slog.Logger
	// ShowKeys logs keys in clear instead of masked (decide.ShowValue).
	ShowKeys bool
	// Changed, if set, counts a change: op is set, delete or expire.
	Changed func(op string)
	// Interval is how often the kept overrides are looked at for changes
	// and expiries. Default DefaultInterval.
	Interval time.Duration
}

// Service applies the kept overrides (it is the policy.Runtime a policy
// plans with) and serves the admin API that changes them. It is safe for
// concurrent use.
type Service struct {
	cfg     Config
	table   atomic.Pointer[table]
	mu      sync.Mutex // serialises refreshes
	version int64
	lastErr time.Time // of a logged store error
	stop    chan struct{}
	done    chan struct{} // closed when the polling Start began ends
	started atomic.Bool
	once    sync.Once
}

var _ policy.Runtime = (*Service)(nil)

// New returns a Service with the overrides the keeper holds now. A store
// that does not answer leaves it empty until it does (logged); Start
// polls for them.
func New(cfg Config) (*Service, error) {
	if cfg.Keeper == nil || cfg.Policy == nil {
		return nil, errors.New("overrides: New: Keeper and Policy are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	s := &Service{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
	s.table.Store(&table{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // a store slow to answer delays no start for long
	defer cancel()
	if err := s.reload(ctx); err != nil {
		s.storeError(err)
	}
	return s, nil
}

// Names implements policy.Runtime.
func (s *Service) Names(limit string) bool { return s.table.Load().names(limit) }

// Override implements policy.Runtime.
func (s *Service) Override(limit, value string) (policy.RuntimeOverride, bool) {
	return s.table.Load().lookup(limit, value, time.Now())
}

// Len is how many overrides are applied now.
func (s *Service) Len() int { return s.table.Load().n }

// Start polls the keeper every Interval until Close.
func (s *Service) Start() {
	if s.started.Swap(true) {
		return
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.poll()
			}
		}
	}()
}

// Close stops the polling Start began, and waits for it.
func (s *Service) Close() {
	s.once.Do(func() {
		close(s.stop)
		if s.started.Load() {
			<-s.done
		}
	})
}

// poll reads the overrides again if they changed, and forgets those that
// expired.
func (s *Service) poll() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.expire(ctx, time.Now())
	v, err := s.cfg.Keeper.Version(ctx)
	if err == nil && v != s.loadedVersion() {
		err = s.reload(ctx)
	}
	if err != nil {
		s.storeError(err)
	}
}

func (s *Service) loadedVersion() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// reload reads every override from the keeper and swaps in their table.
func (s *Service) reload(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	entries, v, err := s.cfg.Keeper.Load(ctx)
	if err != nil {
		return err
	}
	t, bad := newTable(entries)
	for _, e := range bad {
		s.cfg.Logger.Warn("overrides: an override kept in the store cannot be read; it is not applied", "limit", e.Limit, "key", decide.ShowValue(e.Key, s.cfg.ShowKeys))
	}
	s.table.Store(t)
	s.version = v
	return nil
}

// expire deletes the overrides that expired by now; the instance whose
// delete removes one logs and counts it.
func (s *Service) expire(ctx context.Context, now time.Time) {
	t := s.table.Load()
	if t.next.IsZero() || now.Before(t.next) {
		return
	}
	for _, e := range t.entries {
		if !e.expired(now) {
			continue
		}
		found, err := s.cfg.Keeper.Delete(ctx, e.Limit, e.Key)
		if err != nil {
			s.storeError(err)
			return
		}
		if found {
			s.logChange("expire", e, "")
		}
	}
}

// storeError logs a failure to read or write the overrides, at most once
// a minute: the last overrides read stay applied meanwhile.
func (s *Service) storeError(err error) {
	s.mu.Lock()
	log := time.Since(s.lastErr) >= time.Minute
	if log {
		s.lastErr = time.Now()
	}
	s.mu.Unlock()
	if log {
		s.cfg.Logger.Error("overrides: the store did not answer; the overrides read last stay applied", "err", err)
	}
}

// logChange logs and counts one change: op set, delete or expire.
func (s *Service) logChange(op string, e Entry, by string) {
	if s.cfg.Changed != nil {
		s.cfg.Changed(op)
	}
	attrs := []any{"op", op, "limit", e.Limit, "key", decide.ShowValue(e.Key, s.cfg.ShowKeys)}
	if op == "set" {
		attrs = append(attrs, "override", describe(e), "ttl", ttlText(e), "reason", e.Reason)
	}
	if by != "" {
		attrs = append(attrs, "by", by)
	}
	s.cfg.Logger.Info("overrides: "+op, attrs...)
}

// describe says what e does, for logs.
func describe(e Entry) string {
	switch {
	case e.Unlimited:
		return "unlimited"
	case e.Scale != 0:
		return fmt.Sprintf("scale %g", e.Scale)
	}
	return "limit " + string(e.Spec)
}

func ttlText(e Entry) string {
	if e.ExpiresAt.IsZero() {
		return "none"
	}
	return e.ExpiresAt.Sub(e.SetAt).String()
}
