package decide

import "sync"

// maxWaitingNames bounds the limit names counted by waitQueue, in case a
// Source makes up names per request; a request under a name beyond it is
// not made to wait.
const maxWaitingNames = 1024

// waitQueue counts the requests waiting in the middleware (for a shaping
// delay or an Action.Wait) per limit name, and refuses a place beyond max.
type waitQueue struct {
	max    int
	notify func(limit string, delta int) // Config.OnWaiting, or nil
	mu     sync.Mutex
	n      map[string]int
}

// enter takes a place for one more request waiting under limit, and
// reports whether there was one.
func (q *waitQueue) enter(limit string) bool {
	if q.max <= 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	n, ok := q.n[limit]
	if n >= q.max || !ok && len(q.n) >= maxWaitingNames {
		return false
	}
	if q.n == nil {
		q.n = map[string]int{}
	}
	q.n[limit] = n + 1
	if q.notify != nil {
		q.notify(limit, 1)
	}
	return true
}

// leave gives back a place taken by enter.
func (q *waitQueue) leave(limit string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n[limit] <= 1 {
		delete(q.n, limit)
	} else {
		q.n[limit]--
	}
	if q.notify != nil {
		q.notify(limit, -1)
	}
}

// waiting returns how many requests wait under limit.
func (q *waitQueue) waiting(limit string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n[limit]
}
