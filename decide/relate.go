package decide

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// Relation makes a check apply only while another limit is busy (Sentinel's
// RELATE strategy; a policy limit's when: {limit: writes, above: 0.8}):
// reads are throttled while writes use more than 80% of their budget.
//
// The state looked at is the related limit's counter for the key that limit
// gives this request: the front-end plans Key, Slot and Limit as it would
// plan a check of the related limit for the request (the same client
// address, the same tenant; for a global limit its one counter). Run peeks
// at it (a check of cost 0, which charges nothing) in a store call of its
// own, never in the script of the request's other checks, so on a Redis
// Cluster the related key may live in any slot. The related limit is busy
// when more than Above thousandths of its capacity are used (Limit -
// Remaining of the peek; a key in debt is past its capacity).
//
// While the related limit is at or under Above, the check is not checked
// and not charged: Run puts it in Result.Idle, and it appears in neither
// Result.Enforced nor the RateLimit header fields. Above it, the check is
// checked and charged as any other.
//
// When the related limit's state cannot be known (the peek fails, or is
// decided without its store: Decision.Degraded), the check applies: a
// relation never admits what the check alone would refuse. A front-end
// that cannot build the related key for a request (a key part the
// request lacks) plans the check without a Relation, for the same reason.
//
// Peeks are reused for Config.RelateFor (see there for the guarantee).
type Relation struct {
	// Name is the related limit's name, for logs.
	Name string
	// Key, Slot and Limit are what a check of the related limit would be
	// planned with for this request.
	Key, Slot string
	Limit     sluice.Limit
	// Above is the share of the related limit's capacity, in thousandths
	// (800 is 80%), above which the check applies: 1 to 1000.
	Above int64
}

// busy reports whether d, a peek at the related limit, finds it using more
// than r.Above thousandths of its capacity. A decision that knows no
// capacity is busy: the check then applies.
func (r *Relation) busy(d sluice.Decision) bool {
	if d.Limit <= 0 || d.Remaining < 0 {
		return true
	}
	used := d.Limit - d.Remaining
	// ⌊Limit·Above/1000⌋ without overflow: used·1000 > Limit·Above iff
	// used exceeds it.
	share := d.Limit/1000*r.Above + d.Limit%1000*r.Above/1000
	return used > share
}

// relates reports whether c applies to the request: it has no Relation,
// or its related limit is busy or its state unknown.
func (dc *Decider) relates(ctx context.Context, c *Check) bool {
	rel := c.When
	if rel == nil {
		return true
	}
	d, ok := dc.relations.get(rel)
	if !ok {
		start := time.Now()
		var err error
		d, err = dc.limiter.Check(ctx, sluice.Request{Key: rel.Key, Slot: rel.Slot, Limit: rel.Limit, OnError: c.OnError})
		if err != nil || d.Degraded {
			if err != nil {
				dc.logError("the limit a check relates to could not be read; the check applies", err)
			}
			return true
		}
		dc.relations.put(rel, d, start)
	}
	return rel.busy(d)
}

// relationCache keeps the peeks at related limits for Config.RelateFor,
// at most maxRelations of them: a key seen when the cache is full is
// peeked every time until an entry expires. It is safe for concurrent use.
type relationCache struct {
	ttl   time.Duration // <= 0: nothing is kept
	mu    sync.Mutex
	m     map[relationKey]peeked
	swept time.Time // when a full cache last dropped its expired entries
}

// maxRelations bounds the peeks a Decider keeps: related keys may be one
// per client.
const maxRelations = 10000

type relationKey struct {
	key, slot string
	limit     sluice.Limit
}

type peeked struct {
	d     sluice.Decision
	start time.Time // when the peek was sent
}

func (rc *relationCache) get(r *Relation) (sluice.Decision, bool) {
	if rc.ttl <= 0 {
		return sluice.Decision{}, false
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	p, ok := rc.m[relationKey{r.Key, r.Slot, r.Limit}]
	if !ok || time.Since(p.start) >= rc.ttl {
		return sluice.Decision{}, false
	}
	return p.d, true
}

// put keeps d, a peek sent at start. A full cache drops its expired
// entries first (at most once per ttl, so that a flood of new keys does
// not sweep it on every request), and keeps nothing more if none has.
func (rc *relationCache) put(r *Relation, d sluice.Decision, start time.Time) {
	if rc.ttl <= 0 {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.m == nil {
		rc.m = map[relationKey]peeked{}
	}
	k := relationKey{r.Key, r.Slot, r.Limit}
	if _, ok := rc.m[k]; !ok && len(rc.m) >= maxRelations {
		if time.Since(rc.swept) < rc.ttl {
			return
		}
		rc.swept = time.Now()
		for k, p := range rc.m {
			if time.Since(p.start) >= rc.ttl {
				delete(rc.m, k)
			}
		}
		if len(rc.m) >= maxRelations {
			return
		}
	}
	rc.m[k] = peeked{d, start}
}

// When makes a limit of a front-end's own list (httplimit.Limit.When,
// grpclimit.Limit.When) apply only while another limit of the same list is
// busy, for the key that limit gives the request (see Relation). A policy
// writes it when: {limit: writes, above: 0.8}.
type When struct {
	// Limit names the related limit, in the same list.
	Limit string
	// Above is the share of the related limit's capacity, in thousandths
	// (800 is 80%), above which the limit applies: 1 to 1000.
	Above int64
}

// Relations resolves the Whens of a front-end's own list of limits:
// names[i] is the name of limit i and whens[i] its When (nil for none).
// It returns, for each limit, the index of the limit it relates to (-1
// for none), or an error naming the limit whose When relates to no limit
// of the list, to itself, or in a cycle, or whose Above is not 1 to 1000.
func Relations(names []string, whens []*When) ([]int, error) {
	related := make([]int, len(names))
	for i, w := range whens {
		related[i] = -1
		if w == nil {
			continue
		}
		if w.Above < 1 || w.Above > 1000 {
			return nil, fmt.Errorf("limit %q: When.Above must be 1 to 1000 thousandths (got %d)", names[i], w.Above)
		}
		related[i] = slices.Index(names, w.Limit)
		switch {
		case related[i] < 0:
			return nil, fmt.Errorf("limit %q: When.Limit %q names no limit of the list", names[i], w.Limit)
		case related[i] == i:
			return nil, fmt.Errorf("limit %q: When.Limit is the limit itself", names[i])
		}
	}
	for i := range names {
		if c := RelationCycle(i, len(names), func(j int) int { return related[j] }); c != nil {
			path := make([]string, len(c))
			for k, j := range c {
				path[k] = names[j]
			}
			return nil, fmt.Errorf("limit %q: the relations form a cycle: %s", names[i], strings.Join(path, " → "))
		}
	}
	return related, nil
}

// RelationCycle returns the cycle of relations through limit i (the
// indices i, related(i), related(related(i)), ..., i), or nil when the walk
// from i ends (related returns -1) or runs into a cycle i is not on. n is
// the number of limits: a limit relates to one at most, so a walk that has
// not come back in n steps never will.
func RelationCycle(i, n int, related func(int) int) []int {
	path := []int{i}
	for j := related(i); j >= 0 && len(path) <= n; j = related(j) {
		path = append(path, j)
		if j == i {
			return path
		}
	}
	return nil
}

// ListRelation is the Relation of a limit of a front-end's own list for
// one request: key (and err) is what the related limit's key function
// gave the request, name and limit that limit's. The related key is built
// as such a list's keys are (AppendKey of the name and the key). It is nil,
// and the limit applies, when the request has no key under the related
// limit (empty, or an error).
func ListRelation(name, key string, err error, limit sluice.Limit, above int64) *Relation {
	if err != nil || key == "" {
		return nil
	}
	return &Relation{Name: name, Key: string(AppendKey(nil, name, key)), Limit: limit, Above: above}
}
