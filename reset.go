package sluice

import "context"

// Resetter is a Store that can forget one key's state under a limit (every
// limit sharing it: see Limit.Shares), as an operator resets a customer's
// quota: the key then starts afresh, a concurrency key with no lease held.
// sluice's stores implement it; a store that caches refusals outside the
// state (redisstore's near cache) forgets its own, not other instances'.
type Resetter interface {
	// Reset forgets the state r names: r.Key (in r.Slot) under r.Limit.
	// r's Cost and the rest are ignored.
	Reset(ctx context.Context, r Request) error
}
