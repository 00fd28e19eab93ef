// Package bans lists the bans sluice serve's limits started (a policy
// limit's ban:), for the admin listener (GET /admin/bans, sluice keys
// list). The bans themselves are state in the store beside each limit's
// (decide.Ban); this is an index of them, kept in the store too, so that
// every instance sharing a Redis lists the bans any of them started: a
// sorted set of the banned keys (the limits' store keys) scored by when
// each ban ends, trimmed of ended bans and bounded at Max on every write.
// With the memory store it is kept in memory. A ban is written in the
// index before it starts, and one the index cannot take is not started
// (decide.Ban.Index): no ban runs that GET /admin/bans does not list.
package bans

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/decide"
)

// Max bounds the bans listed: past it, the ones ending soonest are
// dropped from the index (they stay banned).
const Max = 10000

// Entry is one ban: the limit's store key it bans, until when.
type Entry struct {
	Key   string
	Until time.Time
}

// Index records and lists bans. It is safe for concurrent use.
type Index interface {
	// Record notes that key is banned until until.
	Record(ctx context.Context, key string, until time.Time) error
	// List returns the bans not ended by now, soonest ending first, at
	// most Max.
	List(ctx context.Context, now time.Time) ([]Entry, error)
	// Lift forgets key's ban (its state in the store is reset apart).
	Lift(ctx context.Context, key string) error
}

var _ decide.BanIndex = Index(nil)

// redisIndex keeps the index in a Redis sorted set.
type redisIndex struct {
	client redis.UniversalClient
	set    string
}

// NewRedis returns the Index in client under PREFIX{bans}.
func NewRedis(client redis.UniversalClient, prefix string) Index {
	return &redisIndex{client: client, set: prefix + "{bans}"}
}

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

func (x *redisIndex) Record(ctx context.Context, key string, until time.Time) error {
	_, err := x.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, x.set, redis.Z{Score: float64(until.UnixMilli()), Member: key})
		p.ZRemRangeByScore(ctx, x.set, "-inf", "("+ms(time.Now()))
		p.ZRemRangeByRank(ctx, x.set, 0, -Max-1) // all but the Max ending last
		return nil
	})
	return err
}

func (x *redisIndex) List(ctx context.Context, now time.Time) ([]Entry, error) {
	zs, err := x.client.ZRangeByScoreWithScores(ctx, x.set, &redis.ZRangeBy{Min: "(" + ms(now), Max: "+inf", Count: Max}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]Entry, 0, len(zs))
	for _, z := range zs {
		if key, ok := z.Member.(string); ok {
			out = append(out, Entry{Key: key, Until: time.UnixMilli(int64(z.Score))})
		}
	}
	return out, nil
}

func (x *redisIndex) Lift(ctx context.Context, key string) error {
	return x.client.ZRem(ctx, x.set, key).Err()
}

// memoryIndex keeps the index in memory.
type memoryIndex struct {
	mu    sync.Mutex
	until map[string]time.Time
}

// NewMemory returns an Index in memory, for a server on the memory store.
func NewMemory() Index { return &memoryIndex{until: map[string]time.Time{}} }

func (x *memoryIndex) Record(_ context.Context, key string, until time.Time) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.until) >= Max {
		now := time.Now()
		for k, u := range x.until {
			if !u.After(now) {
				delete(x.until, k)
			}
		}
		if len(x.until) >= Max {
			return nil // full of bans still running: this one is not listed, though it applies
		}
	}
	x.until[key] = until
	return nil
}

func (x *memoryIndex) List(_ context.Context, now time.Time) ([]Entry, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []Entry
	for k, u := range x.until {
		if u.After(now) {
			out = append(out, Entry{Key: k, Until: u})
		}
	}
	sortEntries(out)
	return out, nil
}

func (x *memoryIndex) Lift(_ context.Context, key string) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.until, key)
	return nil
}
