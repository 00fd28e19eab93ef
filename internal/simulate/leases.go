package simulate

import (
	"container/heap"
	"context"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// Leases holds the concurrency leases of admitted requests on a
// simulated clock until their requests end: a heap by end time, one entry
// per request.
type Leases struct{ h leaseHeap }

type heldLease struct {
	key   string
	limit sluice.Limit
	lease uint64
}

type leaseEntry struct {
	until  time.Time
	leases []heldLease
}

// Hold keeps the leases each[i] of the concurrency requests reqs[i] until
// until; requests with none are not held.
func (q *Leases) Hold(reqs []sluice.Request, each []sluice.Decision, until time.Time) {
	var e leaseEntry
	for i, r := range reqs {
		if algo.Leases(r.Limit.Algorithm) && each[i].Lease != 0 {
			e.leases = append(e.leases, heldLease{r.Key, r.Limit, each[i].Lease})
		}
	}
	if len(e.leases) > 0 {
		e.until = until
		heap.Push(&q.h, e)
	}
}

// ReleaseUntil gives back the leases of every request ended by now.
func (q *Leases) ReleaseUntil(l *sluice.Limiter, now time.Time) error {
	for len(q.h) > 0 && !q.h[0].until.After(now) {
		e := heap.Pop(&q.h).(leaseEntry)
		for _, hl := range e.leases {
			if err := l.Release(context.Background(), sluice.Request{Key: hl.key, Limit: hl.limit}, hl.lease); err != nil {
				return err
			}
		}
	}
	return nil
}

// Len is how many requests hold leases.
func (q *Leases) Len() int { return len(q.h) }

type leaseHeap []leaseEntry

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h leaseHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *leaseHeap) Push(x any)        { *h = append(*h, x.(leaseEntry)) }
func (h *leaseHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
