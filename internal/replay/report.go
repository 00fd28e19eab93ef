package replay

import (
	"encoding/csv"
	"hash/fnv"
	"io"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/accesslog"
)

// Report is what a replay found, in bounded memory: counts, series
// of bounded length, and per limit a bounded table of keys.
type Report struct {
	file, PolicyFile string
	maxKeys          int
	requests         int
	first, last      time.Time
	outcomes         [decide.Invalid + 1]int
	invalidReasons   accesslog.Malformed // requests sluice serve would answer 4xx, by reason
	outOfOrder       int
	bad              accesslog.Malformed
	traffic          series
	busiest          [3]busiest // second, minute, hour
	limits           []*limitStats
	byKey            map[string]*limitStats // by rule and limit name
}

func newReport(maxKeys int) *Report {
	rep := &Report{maxKeys: maxKeys, byKey: map[string]*limitStats{}}
	for i, w := range []time.Duration{time.Second, time.Minute, time.Hour} {
		rep.busiest[i].width = w
	}
	return rep
}

// arrive counts a request at t (never earlier than the one before).
func (rep *Report) arrive(t time.Time) {
	if rep.requests == 0 {
		rep.first = t
	}
	rep.requests++
	rep.last = t
	rep.traffic.add(rep.first, t, 1)
	for i := range rep.busiest {
		rep.busiest[i].add(t)
	}
}

// invalid counts a request planning refused as the client's error.
func (rep *Report) invalid(err error) {
	rep.outcomes[decide.Invalid]++
	reason := err.Error()
	if ce, ok := decide.AsClientError(err); ok {
		reason = ce.Field + ": " + ce.Reason
	}
	rep.invalidReasons.Add(rep.requests, reason)
}

// limit returns the statistics of c's rule and limit.
func (rep *Report) limit(c *decide.Check) *limitStats {
	parts, ok := decide.KeyParts(c.Key)
	rule := ""
	if ok && len(parts) >= 2 {
		rule = parts[0]
	}
	id := rule + "\x00" + c.Name
	ls := rep.byKey[id]
	if ls == nil {
		ls = rep.addLimit(rule, c.Name, c.Limit)
	}
	return ls
}

// addLimit adds the statistics of a limit, listed in the order added.
func (rep *Report) addLimit(rule, name string, l sluice.Limit) *limitStats {
	ls := &limitStats{rule: rule, name: name, limit: l, keys: keyTable{max: max(100, rep.maxKeys/4)}, report: rep}
	rep.byKey[rule+"\x00"+name] = ls
	rep.limits = append(rep.limits, ls)
	return ls
}

// busiest finds the aligned window of width with the most requests.
type busiest struct {
	width   time.Duration
	cur     time.Time
	n, most int
	mostAt  time.Time
}

func (b *busiest) add(t time.Time) {
	if w := t.Truncate(b.width); !w.Equal(b.cur) {
		b.cur, b.n = w, 0
	}
	if b.n++; b.n > b.most {
		b.most, b.mostAt = b.n, b.cur
	}
}

// maxBuckets bounds a series: past it, its buckets are merged into the
// next width of seriesWidths.
const maxBuckets = 2048

// seriesWidths are the bucket widths of a series, each a multiple of the
// one before, so that merging and resampling are exact.
var seriesWidths = []time.Duration{
	time.Second, 2 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 10 * time.Minute,
	30 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 48 * time.Hour, 240 * time.Hour,
}

// nextWidth is the width after w in seriesWidths, or twice w.
func nextWidth(w time.Duration) time.Duration {
	for _, n := range seriesWidths {
		if n > w {
			return n
		}
	}
	return 2 * w
}

// series counts events in buckets of time from a start, at most
// maxBuckets of them: a longer span widens the buckets.
type series struct {
	width  time.Duration
	counts []int
}

func (s *series) add(start, t time.Time, n int) {
	if s.width == 0 {
		s.width = seriesWidths[0]
	}
	i := int(t.Sub(start) / s.width)
	for i >= maxBuckets {
		w := nextWidth(s.width)
		k := int(w / s.width)
		merged := make([]int, (len(s.counts)+k-1)/k)
		for j, c := range s.counts {
			merged[j/k] += c
		}
		s.counts, s.width = merged, w
		i = int(t.Sub(start) / s.width)
	}
	for len(s.counts) <= i {
		s.counts = append(s.counts, 0)
	}
	s.counts[i] += n
}

// resampled returns the counts in columns of width (a multiple of s's)
// over span.
func (s *series) resampled(width, span time.Duration) []int {
	out := make([]int, int(span/width)+1)
	for i, n := range s.counts {
		if j := int(time.Duration(i) * s.width / width); j < len(out) {
			out[j] += n
		}
	}
	return out
}

// limitStats is what one limit of one rule did.
type limitStats struct {
	rule, name string
	limit      sluice.Limit
	report     *Report // whose first request starts the series
	shadow     bool    // a shadow rule's: its refusals would have been
	checked    int
	refused    int
	delayed    int
	checks     series
	refusals   series
	keys       keyTable
}

func (ls *limitStats) label() string {
	s := "rule " + ls.rule + ", limit " + ls.name + ": " + ls.limit.String()
	if ls.shadow {
		s += " (shadow: refusals counted, requests admitted)"
	}
	return s
}

// keyEvent is what happened to one request of a key under a limit.
type keyEvent struct {
	refused, delayed bool // by the policy replayed
	failed           bool // the logged response was a 4xx or 5xx
}

func (ls *limitStats) observe(t time.Time, key string, ev keyEvent, peak int64) {
	ls.checked++
	ls.checks.add(ls.report.first, t, 1)
	if ev.delayed {
		ls.delayed++
	}
	ks := ls.keys.get(key)
	ks.requests++
	ks.peak = max(ks.peak, peak)
	if ev.failed {
		ks.failed++
	}
	if ev.refused {
		ls.refused++
		ls.refusals.add(ls.report.first, t, 1)
		if ks.refused == 0 {
			ks.firstRefused = t
		}
		ks.refused++
		ks.lastRefused = t
	}
}

// keyStats is what one key did under one limit.
type keyStats struct {
	requests, refused         int
	failed                    int // requests the log says failed (4xx, 5xx)
	firstRefused, lastRefused time.Time
	peak                      int64
}

// keyTable holds at most max keys: when full, the half used least
// (refused keys last) is forgotten, and their peaks kept as a histogram
// so percentiles still count them.
type keyTable struct {
	max       int
	m         map[string]*keyStats
	seen      distinct      // every key, for a count once some are forgotten
	forgotten int           // keys forgotten (one seen again after is counted again)
	peaks     map[int64]int // forgotten keys by peak: at most √(2·requests) values
}

func (kt *keyTable) get(key string) *keyStats {
	if ks := kt.m[key]; ks != nil {
		return ks
	}
	kt.seen.add(key)
	if kt.m == nil {
		kt.m = map[string]*keyStats{}
		kt.peaks = map[int64]int{}
	}
	if len(kt.m) >= kt.max {
		kt.forget()
	}
	ks := &keyStats{}
	kt.m[key] = ks
	return ks
}

// forget drops the half of the keys that refused least, then were used
// least.
func (kt *keyTable) forget() {
	type kv struct {
		k string
		s *keyStats
	}
	all := make([]kv, 0, len(kt.m))
	for k, s := range kt.m {
		all = append(all, kv{k, s})
	}
	slices.SortFunc(all, func(a, b kv) int {
		if a.s.refused != b.s.refused {
			return a.s.refused - b.s.refused
		}
		if a.s.requests != b.s.requests {
			return a.s.requests - b.s.requests
		}
		return strings.Compare(a.k, b.k)
	})
	for _, e := range all[:len(all)/2] {
		delete(kt.m, e.k)
		kt.forgotten++
		kt.peaks[e.s.peak]++
	}
}

// count is how many distinct keys were seen: exact unless keys were
// forgotten, then an estimate.
func (kt *keyTable) count() (n int, exact bool) {
	if kt.forgotten == 0 {
		return len(kt.m), true
	}
	return max(kt.seen.estimate(), len(kt.m)), false
}

// peakList returns every key's peak, forgotten ones included, sorted.
func (kt *keyTable) peakList() []int64 {
	out := make([]int64, 0, len(kt.m)+kt.forgotten)
	for _, s := range kt.m {
		out = append(out, s.peak)
	}
	for p, n := range kt.peaks {
		for range n {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// showKey is a key as people read it: its values after the rule and limit
// names, joined by "+".
func showKey(key string) string {
	parts, ok := decide.KeyParts(key)
	if !ok || len(parts) < 2 {
		return key
	}
	if len(parts) == 2 {
		return "(global)"
	}
	return strings.Join(parts[2:], "+")
}

// sortedKeys returns the keys of a limit ordered by less.
func (kt *keyTable) sortedKeys(less func(a, b *keyStats) int) []string {
	keys := make([]string, 0, len(kt.m))
	for k := range kt.m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := less(kt.m[a], kt.m[b]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return keys
}

// WriteCSV writes one CSV line per limit and key: its requests, refusals
// and peak, the keys refused most first.
func (rep *Report) WriteCSV(w io.Writer) {
	cw := csv.NewWriter(w)
	cw.Write([]string{"rule", "limit", "key", "requests", "refused", "first_refused", "last_refused", "peak", "peak_window"})
	for _, ls := range rep.limits {
		for _, k := range ls.keys.sortedKeys(func(a, b *keyStats) int { return b.refused - a.refused }) {
			ks := ls.keys.m[k]
			first, last := "", ""
			if ks.refused > 0 {
				first, last = ks.firstRefused.Format(time.RFC3339Nano), ks.lastRefused.Format(time.RFC3339Nano)
			}
			cw.Write([]string{ls.rule, ls.name, showKey(k), strconv.Itoa(ks.requests), strconv.Itoa(ks.refused), first, last, strconv.FormatInt(ks.peak, 10), sluice.FormatDuration(ls.limit.Period)})
		}
	}
	cw.Flush()
}

// distinct estimates how many distinct keys were seen, in fixed memory
// (a HyperLogLog of 2^12 registers, 4 KB: about 1.6% standard error),
// for when a key table has forgotten keys.
type distinct struct{ reg [1 << 12]uint8 }

func (d *distinct) add(key string) {
	h := fnv.New64a()
	h.Write([]byte(key))
	x := mix64(h.Sum64())
	i := x >> (64 - 12)
	rank := uint8(bits.LeadingZeros64(x<<12|1<<11) + 1)
	d.reg[i] = max(d.reg[i], rank)
}

// mix64 spreads a hash's bits (splitmix64's finaliser).
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// estimate is the number of distinct keys added, about.
func (d *distinct) estimate() int {
	const m = float64(len(d.reg))
	sum, zeros := 0.0, 0
	for _, r := range d.reg {
		sum += math.Pow(2, -float64(r))
		if r == 0 {
			zeros++
		}
	}
	e := 0.7213 / (1 + 1.079/m) * m * m / sum
	if e <= 2.5*m && zeros > 0 { // small range: linear counting
		e = m * math.Log(m/float64(zeros))
	}
	return int(e + 0.5)
}
