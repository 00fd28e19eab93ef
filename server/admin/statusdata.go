package admin

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/decide"
)

// columns are what the status page counts per limit, in its order: every
// decide.Outcome (one that is not here would vanish from the page), then
// without_store, the decisions made without the configured store (by the
// fallback or a failure mode) whatever their outcome.
var columns = [nColumns]string{"admitted", "delayed", "refused", "shadow_admitted", "shadow_refused", "admitted_uncounted", "failed", "invalid", "without_store"}

const (
	nColumns     = 9
	withoutStore = nColumns - 1
)

// Stats keeps what the status page shows: totals per (source, limit,
// column), their history, and the keys refused most often. All are
// bounded: at most maxTracked limits, maxCharted of them with a history,
// and a fixed number of heavy keys.
type Stats struct {
	limits sync.Map   // statsKey -> *[nColumns]atomic.Int64, read without a lock
	mu     sync.Mutex // guards n and the insertions into limits
	n      int        // limits held, at most maxTracked
	heavyM sync.Mutex // guards heavy, taken on refusals only
	heavy  heavyKeys
	hist   history
}

type statsKey struct{ source, limit string }

const maxTracked = 10_000

// columnOf is the column of each decide.Outcome, -1 for none.
var columnOf = func() (c [16]int8) {
	for o := range c {
		c[o] = -1
		for i, col := range columns[:withoutStore] {
			if o > 0 && decide.Outcome(o).String() == col {
				c[o] = int8(i)
			}
		}
	}
	return c
}()

// NewStats returns empty stats whose history keeps points every step
// for window.
func NewStats(step, window time.Duration) *Stats {
	return &Stats{heavy: heavyKeys{max: 32}, hist: newHistory(step, window)}
}

// Add counts one decision of source. Every decision passes here, so the
// common case reads the limit's counters without a lock (shared by every
// core: no write but the counts') and allocates nothing.
func (s *Stats) Add(source string, o decide.Observation) {
	if int(o.Outcome) >= len(columnOf) || columnOf[o.Outcome] < 0 {
		return
	}
	i := columnOf[o.Outcome]
	c := s.counters(statsKey{source, o.Limit})
	if c != nil {
		c[i].Add(1)
		if o.Decision.Degraded || o.Outcome == decide.AdmittedUncounted {
			c[withoutStore].Add(1)
		}
	}
	if o.Outcome == decide.Refused && o.Key != "" {
		s.heavyM.Lock()
		s.heavy.add(source, o.Limit, o.Key)
		s.heavyM.Unlock()
	}
}

// counters returns the counters of id, made on its first decision; nil
// once maxTracked limits are held.
func (s *Stats) counters(id statsKey) *[nColumns]atomic.Int64 {
	if c, ok := s.limits.Load(id); ok {
		return c.(*[nColumns]atomic.Int64)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.limits.Load(id); ok {
		return c.(*[nColumns]atomic.Int64)
	}
	if s.n == maxTracked {
		return nil
	}
	c := new([nColumns]atomic.Int64)
	s.limits.Store(id, c)
	s.n++
	return c
}

// limitStats is one row of the status page.
type limitStats struct {
	Source string           `json:"source"`
	Limit  string           `json:"limit"`
	Counts map[string]int64 `json:"counts"`
}

// totals returns the counters of every limit, sorted by source and limit.
func (s *Stats) totals() map[statsKey][nColumns]int64 {
	out := map[statsKey][nColumns]int64{}
	s.limits.Range(func(id, c any) bool {
		var v [nColumns]int64
		for i := range c.(*[nColumns]atomic.Int64) {
			v[i] = c.(*[nColumns]atomic.Int64)[i].Load()
		}
		out[id.(statsKey)] = v
		return true
	})
	return out
}

// snapshot returns the rows of the totals table and the heavy keys, each
// shown by show.
func (s *Stats) snapshot(show func(key string) string) (rows []limitStats, heavy []heavyKey) {
	for id, v := range s.totals() {
		row := limitStats{Source: id.source, Limit: id.limit, Counts: map[string]int64{}}
		for i, col := range columns {
			row.Counts[col] = v[i]
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Source != rows[j].Source {
			return rows[i].Source < rows[j].Source
		}
		return rows[i].Limit < rows[j].Limit
	})
	s.heavyM.Lock()
	heavy = s.heavy.top()
	s.heavyM.Unlock()
	for i := range heavy {
		heavy[i].Key = show(heavy[i].Key)
	}
	return rows, heavy
}

// heavyKeys finds the keys refused most often with the Space-Saving
// algorithm: max counters; a new key takes over the smallest counter,
// inheriting its count as its possible overestimate. Any key refused more
// than total/max times is guaranteed to be present.
type heavyKeys struct {
	max   int
	items []heavyKey
}

type heavyKey struct {
	// Limit is the source and the limit's name ("gateway per-ip").
	Limit string `json:"limit"`
	// Key is, while counted, the store key; as shown, the names of its
	// parts with their values masked, or as they are when the server
	// shows keys ("ip=key#3f09a1c2d4e5").
	Key   string `json:"key"`
	Count int64  `json:"count"`
	// Error is how much Count may overestimate.
	Error int64 `json:"error"`

	source, limit string // while counted; Limit is made of them by top
}

// add counts one refusal of key under source's limit. It allocates only
// when a key is new to the sketch.
func (h *heavyKeys) add(source, limit, key string) {
	for i := range h.items {
		if it := &h.items[i]; it.Key == key && it.limit == limit && it.source == source {
			it.Count++
			return
		}
	}
	if len(h.items) < h.max {
		h.items = append(h.items, heavyKey{source: source, limit: limit, Key: key, Count: 1})
		return
	}
	min := 0
	for i := range h.items {
		if h.items[i].Count < h.items[min].Count {
			min = i
		}
	}
	c := h.items[min].Count
	h.items[min] = heavyKey{source: source, limit: limit, Key: key, Count: c + 1, Error: c}
}

func (h *heavyKeys) top() []heavyKey {
	out := append([]heavyKey(nil), h.items...)
	for i := range out {
		out[i].Limit = out[i].source + " " + out[i].limit
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Count > out[j].Count })
	return out
}

// Record adds a point to the history: the totals as they are at now.
func (s *Stats) Record(now time.Time) { s.hist.record(now, s.totals()) }

// RecordEvery adds a point to the history every step until stop closes.
func (s *Stats) RecordEvery(step time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(step)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			s.Record(now)
		}
	}
}
