package overrides

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/put.lua
	putLua    string
	putScript = redis.NewScript(putLua)
	//go:embed scripts/delete.lua
	deleteLua    string
	deleteScript = redis.NewScript(deleteLua)
)

// redisKeeper keeps the overrides in a Redis hash beside a version
// counter; both share a hash tag, so that one script changes both on a
// Cluster too.
type redisKeeper struct {
	client        redis.UniversalClient
	hash, version string
}

// NewRedis returns a Keeper of the overrides in client, under keys that
// start with prefix (the store's: "sluice:"): PREFIX{overrides} (a hash)
// and PREFIX{overrides}:version.
func NewRedis(client redis.UniversalClient, prefix string) Keeper {
	return &redisKeeper{client: client, hash: prefix + "{overrides}", version: prefix + "{overrides}:version"}
}

func (k *redisKeeper) Version(ctx context.Context) (int64, error) {
	v, err := k.client.Get(ctx, k.version).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return v, err
}

func (k *redisKeeper) Load(ctx context.Context) ([]Entry, int64, error) {
	var all *redis.MapStringStringCmd
	var ver *redis.StringCmd
	_, err := k.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		all = p.HGetAll(ctx, k.hash)
		ver = p.Get(ctx, k.version)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, err
	}
	v, err := ver.Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, err
	}
	entries := make([]Entry, 0, len(all.Val()))
	for id, js := range all.Val() {
		var e Entry
		if err := json.Unmarshal([]byte(js), &e); err != nil || e.id() != id {
			continue // not an override this version wrote: left alone
		}
		entries = append(entries, e)
	}
	return entries, v, nil
}

func (k *redisKeeper) Put(ctx context.Context, e Entry) error {
	js, err := json.Marshal(e)
	if err != nil {
		return err
	}
	n, err := putScript.Run(ctx, k.client, []string{k.hash, k.version}, e.id(), js, MaxOverrides).Int64()
	if err != nil {
		return fmt.Errorf("keeping the override in Redis: %w", err)
	}
	if n == 0 {
		return ErrFull
	}
	return nil
}

func (k *redisKeeper) Delete(ctx context.Context, limit, key string) (bool, error) {
	n, err := deleteScript.Run(ctx, k.client, []string{k.hash, k.version}, entryID(limit, key)).Int64()
	if err != nil {
		return false, fmt.Errorf("deleting the override in Redis: %w", err)
	}
	return n == 1, nil
}
