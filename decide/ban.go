package decide

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
)

// Ban makes a key that its check's limit refuses stay refused for a while
// (a policy limit's ban: 15m), even after the limit has room again. The
// ban is state in the store beside the limit's, under its own Key, so
// every instance sharing the store sees it: a key is banned while a check
// of Key under BanLimit(duration) refuses a peek.
//
// A front-end plans, with the check that has Ban, the check of the ban
// itself (BanCheck): a peek that refuses while the key is banned, with
// Retry-After the time the ban has left. When Run refuses a request
// because the check with Ban refused (and the ban check did not, so a ban
// is never lengthened by the requests it refuses), it takes the ban key's
// one token, which refuses for the ban's duration from then on (of
// concurrent refusals, one takes it: a ban never goes into debt). That charge is one
// more store call, made only for the refusal that starts a ban; the
// refusals during a ban come from the near cache of a Redis store until
// their Retry-After.
//
// With an Index, the ban is written in it before it starts, and a ban the
// index could not take is not started (the refusal stands on the limit
// alone): every ban running is one the index lists.
type Ban struct {
	// Key is the ban's store key, built with AppendKey and distinct from
	// every limit's keys.
	Key string
	// Limit is BanLimit of the ban's duration.
	Limit sluice.Limit
	// Index, if set, lists the bans (sluice serve's GET /admin/bans).
	Index BanIndex
}

// A BanIndex lists bans for the operators who lift them. It must be safe
// for concurrent use.
type BanIndex interface {
	// Record notes that the limit's key (Check.Key) is banned until
	// until. An error keeps the ban from starting.
	Record(ctx context.Context, key string, until time.Time) error
}

// BanLimit is the limit a ban of duration d keeps its key under: a token
// bucket of one token that refills in d. Charged one, it refuses peeks
// for d.
func BanLimit(d time.Duration) sluice.Limit {
	return sluice.TokenBucket(sluice.Rate{Count: 1, Period: d}, 1)
}

// BanCheck returns the check of c's ban: a peek (cost 0) at the ban key,
// named name, enforced with c's failure mode and action.
func BanCheck(c *Check, name string) Check {
	return Check{Name: name, Key: c.Ban.Key, Slot: c.Slot, Limit: c.Ban.Limit, OnError: c.OnError, Action: c.Action}
}

// ban starts the bans of a refused request: of each check with Ban that
// refused, unless its ban check refused too (the key is banned already).
// The request's Retry-After becomes the longest ban it started, if longer.
func (dc *Decider) ban(ctx context.Context, res *Result) {
	for i := range res.Enforced {
		c := &res.Enforced[i]
		if c.Ban == nil || res.Each[i].Allowed || banned(res, c.Ban.Key) {
			continue
		}
		if !dc.listBan(ctx, c) {
			continue
		}
		// A check, not an adjustment: of concurrent refusals that each
		// found the key not banned, one takes the ban's only token and
		// the others are refused, so a ban is never lengthened by debt.
		d, err := dc.limiter.Check(ctx, sluice.Request{Key: c.Ban.Key, Slot: c.Slot, Limit: c.Ban.Limit, Cost: 1, OnError: c.OnError})
		if err != nil {
			dc.logError("a ban could not be started; the key is refused by its limit alone", err)
			continue
		}
		banFor := d.RetryAfter // banned already, by a concurrent refusal
		if d.Allowed {
			banFor = c.Ban.Limit.Period
			if n := len(res.Observed); n > 0 && res.Observed[n-1].Outcome == Refused && res.Observed[n-1].Key == c.Key {
				res.Observed[n-1].Banned = banFor // the refusal's observation, which enforce made last
			}
		}
		res.Decision.RetryAfter = max(res.Decision.RetryAfter, banFor)
		res.Decision.ResetAfter = max(res.Decision.ResetAfter, banFor)
	}
}

// listBan writes the ban c's refusal starts in its index, if it has one,
// and reports whether the ban may start: not when the index failed, so
// that no ban runs that the index does not list.
func (dc *Decider) listBan(ctx context.Context, c *Check) bool {
	if c.Ban.Index == nil {
		return true
	}
	err := c.Ban.Index.Record(ctx, c.Key, time.Now().Add(c.Ban.Limit.Period))
	if err != nil {
		dc.logError("a ban could not be listed, so it was not started; the key is refused by its limit alone", err)
	}
	return err == nil
}

// banned reports whether the request's ban check of key found the key
// banned: its bucket empty. (Allowed would not tell: an all-or-nothing
// refusal reports every check of the request refused.)
func banned(res *Result, key string) bool {
	for j := range res.Enforced {
		if res.Enforced[j].Key == key {
			return res.Each[j].Remaining < 1
		}
	}
	return false
}
