package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// backend is the store the server decides with, and how to tell it works.
type backend struct {
	store sluice.Store
	// ready reports whether the store answers.
	ready func(ctx context.Context) error
	// keys counts the keys a memory store holds (nil for Redis).
	keys func() int
	// failover is the breaker in front of Redis (nil for memory).
	failover *failover.Store
	close    func() error
	desc     string
}

// openStore builds the store cfg describes. A Redis store sits behind a
// failover.Store: a deadline per call, a circuit breaker, and the failure
// mode of each request: the one it carries (its policy rule's on_error),
// else store.redis.on_error.
func openStore(cfg StoreConfig, onStateChange func(from, to failover.State), logger *slog.Logger) (*backend, error) {
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
		r := cfg.Redis
		timeout := time.Duration(r.Timeout)
		if timeout == 0 {
			timeout = 50 * time.Millisecond
		}
		// The client's socket timeouts free a pipeline stuck on a hung
		// server soon after the per-call deadline (failover's) has given
		// up on it; no retries: the breaker is the retry policy
		// (docs/operations.md, "Choosing the deadline").
		sock := max(2*timeout, 100*time.Millisecond)
		addrs, rediss := redisAddrs(r.Addrs)
		dialer, err := redisDialer(r.TLS, rediss || r.TLS.Enabled, sock, logger)
		if err != nil {
			return nil, err
		}
		creds, err := redisCredentials(r.Username, r.PasswordFile, logger)
		if err != nil {
			return nil, err
		}
		scheme := "redis"
		if dialer != nil {
			scheme = "rediss"
		}
		var client redis.UniversalClient
		var desc string
		var cluster *redis.ClusterClient
		switch {
		case r.Cluster:
			cluster = redis.NewClusterClient(&redis.ClusterOptions{
				Addrs: addrs, Username: r.Username, Password: r.Password, CredentialsProvider: creds, Dialer: dialer,
				DialTimeout: sock, ReadTimeout: sock, WriteTimeout: sock, ContextTimeoutEnabled: true, MaxRetries: -1,
				// A dead master answers no MOVED: reread the slot map
				// often so a promoted replica is found soon.
				ClusterStateReloadInterval: time.Second,
			})
			client = cluster
			desc = fmt.Sprintf("%s cluster %v", scheme, addrs)
		case r.MasterName != "":
			client = redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: r.MasterName, SentinelAddrs: addrs, Username: r.Username, Password: r.Password, DB: r.DB,
				CredentialsProvider: creds, Dialer: dialer,
				DialTimeout: sock, ReadTimeout: sock, WriteTimeout: sock, ContextTimeoutEnabled: true, MaxRetries: -1,
			})
			desc = fmt.Sprintf("%s sentinel %q %v", scheme, r.MasterName, addrs)
		default:
			if len(addrs) != 1 {
				return nil, errors.New("store.redis.addrs: a standalone server takes one address; for several set cluster: true or master_name")
			}
			client = redis.NewClient(&redis.Options{
				Addr: addrs[0], Username: r.Username, Password: r.Password, DB: r.DB, CredentialsProvider: creds, Dialer: dialer,
				DialTimeout: sock, ReadTimeout: sock, WriteTimeout: sock, ContextTimeoutEnabled: true, MaxRetries: -1,
			})
			desc = fmt.Sprintf("%s %s", scheme, addrs[0])
		}
		warmUp(client)
		primary, err := redisstore.New(client, redisstore.Config{Prefix: r.Prefix, NearCache: r.NearCache})
		if err != nil {
			client.Close()
			return nil, err
		}
		defaultMode := failover.FailOpen
		if r.OnError != "" {
			defaultMode, _ = failover.ParseMode(r.OnError) // validated
		}
		b := &backend{
			ready: func(ctx context.Context) error { return client.Ping(ctx).Err() },
			desc:  desc,
		}
		fs, err := failover.New(primary, failover.Config{
			Timeout:             timeout,
			ConsecutiveFailures: r.Breaker.ConsecutiveFailures,
			FailureRatio:        r.Breaker.FailureRatio,
			MinCalls:            r.Breaker.MinCalls,
			Window:              time.Duration(r.Breaker.Window),
			ProbeInterval:       time.Duration(r.Breaker.ProbeInterval),
			FallbackScale:       r.FallbackScale,
			Mode:                func(sluice.Request) failover.Mode { return defaultMode },
			OnStateChange: func(from, to failover.State) {
				if to == failover.StateOpen && cluster != nil {
					cluster.ReloadState(context.Background()) // asynchronous
				}
				onStateChange(from, to)
			},
			Logger: logger,
		})
		if err != nil {
			client.Close()
			return nil, err
		}
		b.store, b.failover = fs, fs
		b.close = func() error {
			fs.Close()
			primary.Close()
			return client.Close()
		}
		return b, nil
	}
	return nil, fmt.Errorf("store.type: %q: want memory or redis", cfg.Type)
}

// warmUp connects to Redis before the first request needs it: a cluster
// client learns the slot map, every client opens a connection. A Redis
// that does not answer yet is not an error here: /readyz reports it, and
// requests meanwhile are decided by the failure mode.
func warmUp(client redis.UniversalClient) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if c, ok := client.(*redis.ClusterClient); ok {
		c.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error {
			return shard.Ping(ctx).Err()
		})
		return
	}
	client.Ping(ctx)
}
