package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/server/config"
)

// backend is the store the server decides with, and how to tell it works.
type backend struct {
	store sluice.Store
	// ready reports whether the store answers.
	ready func(ctx context.Context) error
	// answered is set once the store has answered a probe (at start or
	// from /readyz): until then, a store that does not answer is more
	// likely misconfigured than down.
	answered atomic.Bool
	// keys counts the keys a memory store holds (nil for Redis).
	keys func() int
	// failover is the breaker in front of Redis (nil for memory).
	failover *failover.Store
	// leases reports the Redis store's quota leases (nil without them).
	leases func() redisstore.LeaseStats
	close  func() error
	desc   string
	// client and prefix are Redis's, where the runtime overrides are
	// kept (nil for memory).
	client redis.UniversalClient
	prefix string
}

// openStore builds the store cfg describes. A Redis store sits behind a
// failover.Store: a deadline per call, a circuit breaker, and the failure
// mode of each request: the one it carries (its policy rule's on_error),
// else store.redis.on_error.
func openStore(cfg config.StoreConfig, onStateChange func(from, to failover.State), logger *slog.Logger) (*backend, error) {
	switch cfg.Type {
	case "memory":
		s, err := memstore.New(memstore.Config{MaxKeys: cfg.MaxKeys})
		if err != nil {
			return nil, err
		}
		return &backend{
			store: s,
			ready: func(context.Context) error { return nil },
			keys:  s.Len,
			close: s.Close,
			desc:  fmt.Sprintf("memory (max_keys %d)", cfg.MaxKeys),
		}, nil
	case "redis":
		return openRedis(cfg, onStateChange, logger)
	}
	return nil, fmt.Errorf("store.type: %q: want memory or redis", cfg.Type)
}

// openRedis connects to Redis, probes it, and builds the failover.Store
// in front of it with a warm local fallback and, unless fallback_scale is
// set, a census of the instances that sets the fallback's share.
func openRedis(cfg config.StoreConfig, onStateChange func(from, to failover.State), logger *slog.Logger) (*backend, error) {
	r := cfg.Redis
	timeout := cmp.Or(time.Duration(r.Timeout), 50*time.Millisecond)
	client, cluster, desc, err := redisClient(r, timeout, logger)
	if err != nil {
		return nil, err
	}
	defaultMode := failover.Fallback
	if r.OnError != "" {
		defaultMode, _ = failover.ParseMode(r.OnError) // validated
	}
	b := &backend{ready: func(ctx context.Context) error { return ping(ctx, client) }, desc: desc}
	if err := probe(b, r.Require, logger, defaultMode); err != nil {
		client.Close()
		return nil, err
	}
	rcfg := redisStoreConfig(r)
	rcfg.Slots = cluster != nil // the checks of rules with one_slot share a slot
	primary, err := redisstore.New(client, rcfg)
	if err != nil {
		client.Close()
		return nil, err
	}
	local, err := memstore.New(memstore.Config{MaxKeys: cfg.MaxKeys})
	if err != nil {
		client.Close()
		return nil, err
	}
	fcfg := failoverConfig(r, timeout, logger)
	fcfg.FallbackStore = local
	fcfg.Mode = func(sluice.Request) failover.Mode { return defaultMode }
	fcfg.OnStateChange = func(from, to failover.State) {
		if to == failover.StateOpen && cluster != nil {
			cluster.ReloadState(context.Background()) // asynchronous
		}
		onStateChange(from, to)
	}
	fs, err := failover.New(primary, fcfg)
	if err != nil {
		local.Close()
		client.Close()
		return nil, err
	}
	b.own(r, client, primary, local, fs, logger)
	return b, nil
}

// own makes b decide with fs, the failover.Store openRedis built in front
// of primary and local, and close what it holds: the census of instances
// (started here unless fallback_scale is set), fs, primary, local, then
// the client.
func (b *backend) own(r config.RedisConfig, client redis.UniversalClient, primary *redisstore.Store, local *memstore.Store, fs *failover.Store, logger *slog.Logger) {
	b.store, b.failover = fs, fs
	b.client, b.prefix = client, cmp.Or(r.Prefix, "sluice:")
	if r.Leases.Enabled {
		b.leases = primary.LeaseStats
	}
	var cs *census
	if r.FallbackScale == 0 {
		cs = startCensus(client, cmp.Or(r.Prefix, "sluice:"), fs, logger, censusInterval)
	}
	b.close = func() error {
		if cs != nil {
			cs.close()
		}
		fs.Close()
		primary.Close()
		local.Close()
		return client.Close()
	}
}

// redisStoreConfig is the redisstore.Config that r's settings describe.
func redisStoreConfig(r config.RedisConfig) redisstore.Config {
	return redisstore.Config{Prefix: r.Prefix, NearCache: r.NearCache, Leases: redisstore.LeaseConfig{
		Enabled: r.Leases.Enabled, Traffic: time.Duration(r.Leases.Traffic), Share: r.Leases.Share,
		Hold: time.Duration(r.Leases.Hold), Keys: r.Leases.Keys,
	}}
}

// failoverConfig is the failover.Config that r's settings describe: the
// call timeout, the breaker and the fallback scale. The fallback store,
// the mode and the state hook are openRedis's to set.
func failoverConfig(r config.RedisConfig, timeout time.Duration, logger *slog.Logger) failover.Config {
	return failover.Config{
		Timeout:             timeout,
		ConsecutiveFailures: r.Breaker.ConsecutiveFailures,
		FailureRatio:        r.Breaker.FailureRatio,
		MinCalls:            r.Breaker.MinCalls,
		Window:              time.Duration(r.Breaker.Window),
		ProbeInterval:       time.Duration(r.Breaker.ProbeInterval),
		FallbackScale:       r.FallbackScale,
		Logger:              logger,
	}
}

// redisClient returns the go-redis client r describes (cluster is set for
// a Cluster) and a description for the log and the status page. Its socket
// timeouts free a pipeline stuck on a hung server soon after the per-call
// deadline (failover's) has given up on it; it retries neither commands
// nor dials (a refused dial fails at once, where go-redis would retry it 5
// times, 100 ms apart): the breaker is the retry policy
// (docs/operations.md, "Choosing the timeout").
func redisClient(r config.RedisConfig, timeout time.Duration, logger *slog.Logger) (client redis.UniversalClient, cluster *redis.ClusterClient, desc string, err error) {
	// The client's socket timeouts free a pipeline stuck on a hung server
	// soon after the per-call deadline (failover's) has given up on it; no
	// retries, and one dial: the breaker is the retry policy
	// (docs/operations.md, "Choosing the deadline").
	sock := max(2*timeout, 100*time.Millisecond)
	const dials = 1
	addrs, rediss := config.RedisAddrs(r.Addrs)
	dialer, err := redisDialer(r.TLS, rediss || r.TLS.Enabled, sock, logger)
	if err != nil {
		return nil, nil, "", err
	}
	creds, err := redisCredentials(r.Username, r.PasswordFile, logger)
	if err != nil {
		return nil, nil, "", err
	}
	scheme := "redis"
	if dialer != nil {
		scheme = "rediss"
	}
	switch {
	case r.Cluster:
		cluster = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: addrs, Username: r.Username, Password: r.Password, CredentialsProvider: creds, Dialer: dialer,
			DialTimeout: sock, ReadTimeout: sock, WriteTimeout: sock, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: dials,
			// A dead master answers no MOVED: reread the slot map
			// often so a promoted replica is found soon.
			ClusterStateReloadInterval: time.Second,
			MaintNotificationsConfig:   noMaintNotifications(),
		})
		return cluster, cluster, fmt.Sprintf("%s cluster %v", scheme, addrs), nil
	case r.MasterName != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: r.MasterName, SentinelAddrs: addrs, Username: r.Username, Password: r.Password, DB: r.DB,
			CredentialsProvider: creds, Dialer: dialer,
			DialTimeout: sock, ReadTimeout: sock, WriteTimeout: sock, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: dials,
		}), nil, fmt.Sprintf("%s sentinel %q %v", scheme, r.MasterName, addrs), nil
	case len(addrs) != 1:
		return nil, nil, "", errors.New("store.redis.addrs: a standalone server takes one address; for several set cluster: true or master_name")
	}
	return redis.NewClient(&redis.Options{
		Addr: addrs[0], Username: r.Username, Password: r.Password, DB: r.DB, CredentialsProvider: creds, Dialer: dialer,
		DialTimeout: sock, ReadTimeout: sock, WriteTimeout: sock, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: dials,
		MaintNotificationsConfig: noMaintNotifications(),
	}), nil, fmt.Sprintf("%s %s", scheme, addrs[0]), nil
}

// noMaintNotifications turns off go-redis's maintenance notifications
// (a managed-Redis feature sluice does not use). Left on "auto", every new
// connection first sends CLIENT MAINT_NOTIFICATIONS, which open-source Redis
// refuses, and the client then disables the feature under a lock: after a
// stall has closed the pool's connections, the redial storm queued callers
// on that lock for up to 0.9 s (mutex profile of failover's stall test).
func noMaintNotifications() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// probe connects to the store before the first request needs it (a
// cluster client learns the slot map, every client opens a connection) and
// says plainly when it does not answer: an error if require is set (sluice
// serve then refuses to start), else a warning naming the failure mode that
// decides meanwhile.
func probe(b *backend, require bool, logger *slog.Logger, mode failover.Mode) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	err := b.ready(ctx)
	switch {
	case err == nil:
		b.answered.Store(true)
		logger.Info("the store answers", "store", b.desc)
		return nil
	case require:
		return fmt.Errorf("%s does not answer (store.redis.require is set): %w", b.desc, err)
	}
	logger.Warn("the store does not answer; requests are decided by their failure mode until it does",
		"store", b.desc, "err", err, "on_error", mode.String(), "hint", hint(err))
	return nil
}

// probeTimeout bounds the probe at start.
const probeTimeout = 2 * time.Second

// hint says what a store error at start most likely means.
func hint(err error) string {
	switch {
	case redis.IsAuthError(err), redis.IsPermissionError(err):
		return "check store.redis.username and password (SLUICE_REDIS_PASSWORD)"
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer within " + probeTimeout.String() + ": check store.redis.addrs and the network"
	}
	return "check store.redis.addrs and that Redis runs"
}

// ping pings the server, or every shard of a cluster.
func ping(ctx context.Context, client redis.UniversalClient) error {
	if c, ok := client.(*redis.ClusterClient); ok {
		return c.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error {
			return shard.Ping(ctx).Err()
		})
	}
	return client.Ping(ctx).Err()
}

// readiness reports whether the store answers; misconfigured is set when
// it does not and that is more likely a mistake of the configuration than
// an outage: it has never answered since start, or it refuses sluice's
// credentials.
func (b *backend) readiness(ctx context.Context) (misconfigured bool, err error) {
	if err = b.ready(ctx); err == nil {
		b.answered.Store(true)
		return false, nil
	}
	return !b.answered.Load() || redis.IsAuthError(err) || redis.IsPermissionError(err), err
}
