package decide

import (
	"cmp"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Bounds of the refusal logs: how many distinct (limit, key) pairs and
// limit names are counted per interval, and how many keys a line lists.
// Refusals beyond them are still counted in the line's totals, so logging
// costs bounded memory however many keys are refused.
const (
	maxTrackedKeys  = 1000
	maxTrackedNames = 1000
	maxListedKeys   = 10
	logInterval     = time.Second
)

// refusalLog counts refusals per limit and key and writes them as one log
// line per interval in which there were any: the total, the count per
// limit, the keys refused most with their counts, and how many more keys
// there were. A refusal schedules the line for the end of its interval, so
// no line is ever written per request, and none when nothing was refused.
type refusalLog struct {
	msg      string
	logger   *slog.Logger
	interval time.Duration
	show     func(key string) string // Config.KeyText

	mu       sync.Mutex
	since    time.Time
	timer    *time.Timer
	total    int
	byLimit  map[string]int
	byKey    map[limitKey]int
	untraced int // refusals of limits or keys beyond the bounds
	capped   bool
}

type limitKey struct{ limit, key string }

func newRefusalLog(logger *slog.Logger, msg string, show func(string) string) *refusalLog {
	return &refusalLog{msg: msg, logger: logger, interval: logInterval, show: show,
		byLimit: map[string]int{}, byKey: map[limitKey]int{}}
}

// add counts one refusal of key under limit.
func (l *refusalLog) add(limit, key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total == 0 {
		l.since = time.Now()
		if l.interval > 0 {
			l.timer = time.AfterFunc(l.interval, l.flush)
		}
	}
	l.total++
	if _, ok := l.byLimit[limit]; ok || len(l.byLimit) < maxTrackedNames {
		l.byLimit[limit]++
	} else {
		l.capped = true
	}
	k := limitKey{limit, key}
	if _, ok := l.byKey[k]; ok || len(l.byKey) < maxTrackedKeys {
		l.byKey[k]++
	} else {
		l.untraced++
		l.capped = true
	}
}

// flush writes the line for the refusals counted so far, if any, and starts
// a new interval.
func (l *refusalLog) flush() {
	l.mu.Lock()
	if l.total == 0 {
		l.mu.Unlock()
		return
	}
	type kc struct {
		limitKey
		n int
	}
	keys := make([]kc, 0, len(l.byKey))
	for k, n := range l.byKey {
		keys = append(keys, kc{k, n})
	}
	slices.SortFunc(keys, func(a, b kc) int {
		return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.limit, b.limit), cmp.Compare(a.key, b.key))
	})
	limits := make([]slog.Attr, 0, len(l.byLimit))
	for name, n := range l.byLimit {
		limits = append(limits, slog.Int(name, n))
	}
	slices.SortFunc(limits, func(a, b slog.Attr) int { return cmp.Compare(a.Key, b.Key) })
	shown := keys[:min(len(keys), maxListedKeys)]
	top := make([]slog.Attr, 0, len(shown))
	moreRefusals := l.untraced
	for i, k := range shown {
		top = append(top, slog.Group(strconv.Itoa(i+1), "limit", k.limit, "key", l.show(k.key), "refused", k.n))
	}
	for _, k := range keys[len(shown):] {
		moreRefusals += k.n
	}
	args := []any{
		"interval", time.Since(l.since).Round(time.Millisecond).String(),
		"refused", l.total,
		slog.Attr{Key: "by_limit", Value: slog.GroupValue(limits...)},
		slog.Attr{Key: "top_keys", Value: slog.GroupValue(top...)},
		"more_keys", len(keys) - len(shown),
		"more_keys_refused", moreRefusals,
	}
	if l.capped {
		// More keys than are tracked: more_keys counts only those tracked.
		args = append(args, "more_keys_untracked", true)
	}
	l.total, l.untraced, l.capped = 0, 0, false
	clear(l.byLimit)
	clear(l.byKey)
	l.timer = nil
	l.mu.Unlock()
	l.logger.Info(l.msg, args...)
}
