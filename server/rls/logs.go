package rls

import (
	"log/slog"
	"sort"
	"sync"
	"time"
)

// aggregator counts the events that happen per request (shadow-mode
// refusals, requests for unknown domains, store errors) and writes one log
// line per kind per interval with the counts, never one per request. A
// timer is armed by the first event of an interval, so nothing runs while
// nothing happens.
type aggregator struct {
	log      *slog.Logger
	interval time.Duration

	mu      sync.Mutex
	timer   *time.Timer
	closed  bool
	shadows map[shadowKey]int64 // bounded by the configuration's rules
	unknown int64
	sample  string // one unknown domain seen, truncated
	errs    int64
	lastErr string
}

type shadowKey struct{ domain, path string }

func newAggregator(log *slog.Logger, interval time.Duration) *aggregator {
	return &aggregator{log: log, interval: interval, shadows: map[shadowKey]int64{}}
}

// arm starts the timer if none is pending. Called with mu held.
func (a *aggregator) arm() {
	if a.timer == nil && !a.closed {
		a.timer = time.AfterFunc(a.interval, a.flush)
	}
}

func (a *aggregator) shadow(domain, path string) {
	a.mu.Lock()
	a.shadows[shadowKey{domain, path}]++
	a.arm()
	a.mu.Unlock()
}

func (a *aggregator) unknownDomain(domain string) {
	a.mu.Lock()
	if a.unknown == 0 {
		a.sample = truncate(domain, 64)
	}
	a.unknown++
	a.arm()
	a.mu.Unlock()
}

func (a *aggregator) storeError(domain string, err error) {
	a.mu.Lock()
	a.errs++
	a.lastErr = truncate(err.Error(), 256)
	a.arm()
	a.mu.Unlock()
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// flush writes and resets the counts.
func (a *aggregator) flush() {
	a.mu.Lock()
	shadows, unknown, sample, errs, lastErr := a.shadows, a.unknown, a.sample, a.errs, a.lastErr
	a.shadows, a.unknown, a.sample, a.errs, a.lastErr = map[shadowKey]int64{}, 0, "", 0, ""
	a.timer = nil
	a.mu.Unlock()

	keys := make([]shadowKey, 0, len(shadows))
	for k := range shadows {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].domain != keys[j].domain {
			return keys[i].domain < keys[j].domain
		}
		return keys[i].path < keys[j].path
	})
	for _, k := range keys {
		a.log.Info("rls: shadow_mode limit over, admitted", "domain", k.domain, "descriptor", k.path,
			"count", shadows[k], "interval", a.interval)
	}
	if unknown > 0 {
		a.log.Warn("rls: requests for unknown domains answered OK without limits", "count", unknown,
			"example", sample, "interval", a.interval)
	}
	if errs > 0 {
		a.log.Error("rls: store errors answered Unavailable", "count", errs, "last", lastErr, "interval", a.interval)
	}
}

func (a *aggregator) close() {
	a.mu.Lock()
	a.closed = true
	pending := a.timer != nil && a.timer.Stop()
	a.timer = nil
	a.mu.Unlock()
	if pending {
		a.flush()
	}
}
