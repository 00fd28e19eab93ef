package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// backend is the store the server decides with, and how to tell it works.
type backend struct {
	store sluice.Store
	// ready reports whether the store answers.
	ready func(ctx context.Context) error
	// keys counts the keys a memory store holds (nil for Redis).
	keys  func() int
	close func() error
	desc  string
}

// openStore builds the store cfg describes.
func openStore(cfg StoreConfig) (*backend, error) {
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
		// The client's own timeouts are a backstop for the per-call
		// deadline (timeoutStore): generous, so a slow moment is not a
		// broken connection.
		var client redis.UniversalClient
		var desc string
		switch {
		case r.Cluster:
			client = redis.NewClusterClient(&redis.ClusterOptions{
				Addrs: r.Addrs, Username: r.Username, Password: r.Password,
				DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
			})
			desc = fmt.Sprintf("redis cluster %v", r.Addrs)
		case r.MasterName != "":
			client = redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: r.MasterName, SentinelAddrs: r.Addrs, Username: r.Username, Password: r.Password, DB: r.DB,
				DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
			})
			desc = fmt.Sprintf("redis sentinel %q %v", r.MasterName, r.Addrs)
		default:
			if len(r.Addrs) != 1 {
				return nil, errors.New("store.redis.addrs: a standalone server takes one address; for several set cluster: true or master_name")
			}
			client = redis.NewClient(&redis.Options{
				Addr: r.Addrs[0], Username: r.Username, Password: r.Password, DB: r.DB,
				DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
			})
			desc = fmt.Sprintf("redis %s", r.Addrs[0])
		}
		warmUp(client)
		s, err := redisstore.New(client, redisstore.Config{Prefix: r.Prefix, NearCache: r.NearCache})
		if err != nil {
			client.Close()
			return nil, err
		}
		return &backend{
			store: timeoutStore{s, timeout},
			ready: func(ctx context.Context) error { return client.Ping(ctx).Err() },
			close: client.Close,
			desc:  desc,
		}, nil
	}
	return nil, fmt.Errorf("store.type: %q: want memory or redis", cfg.Type)
}

// timeoutStore bounds each call of a store.
type timeoutStore struct {
	sluice.Store
	timeout time.Duration
}

func (s timeoutStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.Store.Take(ctx, r)
}

func (s timeoutStore) TakeAll(ctx context.Context, rs []sluice.Request, ds []sluice.Decision) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.Store.TakeAll(ctx, rs, ds)
}

func (s timeoutStore) Release(ctx context.Context, key string, l sluice.Limit, lease uint64) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.Store.Release(ctx, key, l, lease)
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
