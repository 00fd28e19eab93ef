package admin

import (
	"sort"
	"sync"
	"time"
)

// maxCharted bounds the limits (source and name) the history keeps points
// for: the first seen. It bounds the history's memory to about
// maxCharted × points × 36 bytes (64 × 300 × 36 = 690 KB at most).
const maxCharted = 64

// history keeps, for the status page, how many decisions each limit made
// in each step of the last window: a ring of points, the same for every
// limit, recorded by record from the totals. The page is useful the moment
// it opens, and the memory is bounded whatever the traffic.
type history struct {
	mu     sync.Mutex
	step   time.Duration
	times  []int64 // Unix ms of each point, a ring
	next   int     // where the next point goes
	filled int     // points recorded, at most len(times)
	last   map[statsKey][nColumns]int64
	series map[statsKey][][nColumns]uint32 // rings like times
	// dropped counts limits seen but not charted (beyond maxCharted).
	dropped int
}

// newHistory returns an empty history of window/step points.
func newHistory(step, window time.Duration) history {
	n := max(2, int(window/step))
	return history{step: step, times: make([]int64, n), last: map[statsKey][nColumns]int64{}, series: map[statsKey][][nColumns]uint32{}}
}

// record adds a point at now from the totals: what each limit decided
// since the previous point.
func (h *history) record(now time.Time, totals map[statsKey][nColumns]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.times)
	for id, v := range totals {
		ring, ok := h.series[id]
		if !ok {
			if len(h.series) >= maxCharted {
				if _, seen := h.last[id]; !seen {
					h.dropped++
					h.last[id] = v
				}
				continue
			}
			ring = make([][nColumns]uint32, n)
			h.series[id] = ring
		}
		prev := h.last[id]
		var p [nColumns]uint32
		for i := range v {
			p[i] = uint32(min(max(v[i]-prev[i], 0), 1<<32-1))
		}
		ring[h.next] = p
		h.last[id] = v
	}
	for id, ring := range h.series {
		if _, ok := totals[id]; !ok {
			ring[h.next] = [nColumns]uint32{}
		}
	}
	h.times[h.next] = now.UnixMilli()
	h.next = (h.next + 1) % n
	h.filled = min(h.filled+1, n)
}

// historyDoc is the history as the status page reads it: the times of the
// points (Unix ms, oldest first) and, per limit, the decisions of each
// column in the step that ended at each time (only the columns with any).
type historyDoc struct {
	StepSeconds   float64         `json:"step_seconds"`
	WindowSeconds float64         `json:"window_seconds"`
	Times         []int64         `json:"times"`
	Series        []historySeries `json:"series"`
	NotCharted    int             `json:"not_charted,omitempty"`
}

type historySeries struct {
	Source string             `json:"source"`
	Limit  string             `json:"limit"`
	Points map[string][]int64 `json:"points"`
}

func (h *history) doc() historyDoc {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.times)
	first := (h.next - h.filled + n) % n
	d := historyDoc{StepSeconds: h.step.Seconds(), WindowSeconds: (time.Duration(n) * h.step).Seconds(), Times: make([]int64, h.filled),
		Series: []historySeries{}, NotCharted: h.dropped}
	for i := range h.filled {
		d.Times[i] = h.times[(first+i)%n]
	}
	for id, ring := range h.series {
		s := historySeries{Source: id.source, Limit: id.limit, Points: map[string][]int64{}}
		for c, col := range columns {
			var pts []int64
			any := false
			for i := range h.filled {
				v := int64(ring[(first+i)%n][c])
				any = any || v != 0
				pts = append(pts, v)
			}
			if any {
				s.Points[col] = pts
			}
		}
		d.Series = append(d.Series, s)
	}
	sort.Slice(d.Series, func(i, j int) bool {
		if d.Series[i].Source != d.Series[j].Source {
			return d.Series[i].Source < d.Series[j].Source
		}
		return d.Series[i].Limit < d.Series[j].Limit
	})
	return d
}
