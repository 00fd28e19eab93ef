package sluiceclient

import (
	"sync"
	"time"
)

// buckets is the number of slots a window is counted in: counts leave the
// window one slot (a tenth of it) at a time.
const buckets = 10

// window counts two kinds of events over a sliding window of time, in
// buckets slots. It is safe for concurrent use.
type window struct {
	mu    sync.Mutex
	slot  time.Duration
	start time.Time // start of the newest slot
	pos   int       // index of the newest slot
	a, b  [buckets]int64
	sumA  int64
	sumB  int64
}

func newWindow(length time.Duration) *window {
	return &window{slot: max(length/buckets, time.Nanosecond)}
}

// advance drops the slots that have left the window as of now. The caller
// holds w.mu.
func (w *window) advance(now time.Time) {
	if w.start.IsZero() {
		w.start = now
		return
	}
	n := int64(now.Sub(w.start) / w.slot)
	if n <= 0 {
		return
	}
	for i := int64(0); i < min(n, buckets); i++ {
		w.pos = (w.pos + 1) % buckets
		w.sumA -= w.a[w.pos]
		w.sumB -= w.b[w.pos]
		w.a[w.pos], w.b[w.pos] = 0, 0
	}
	w.start = w.start.Add(time.Duration(n) * w.slot)
}

// add counts da events of the first kind and db of the second at now, and
// returns the sums over the window after counting.
func (w *window) add(now time.Time, da, db int64) (a, b int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.advance(now)
	w.a[w.pos] += da
	w.b[w.pos] += db
	w.sumA += da
	w.sumB += db
	return w.sumA, w.sumB
}

// budget is a retry budget in the manner of Finagle's RetryBudget and gRPC's
// retry throttling: a retry is allowed while the retries of the last window
// stay within ratio × the requests of the window, plus floor.
type budget struct {
	ratio float64
	floor int64
	w     *window // a: first attempts, b: retries
}

func newBudget(s settings) *budget {
	return &budget{ratio: max(s.BudgetRatio, 0), floor: int64(max(s.BudgetFloor, 0)), w: newWindow(s.BudgetWindow)}
}

// request counts a first attempt.
func (b *budget) request(now time.Time) { b.w.add(now, 1, 0) }

// withdraw takes one retry from the budget and reports whether there was
// one to take.
func (b *budget) withdraw(now time.Time) bool {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	b.w.advance(now)
	if float64(b.w.sumB+1) > b.ratio*float64(b.w.sumA)+float64(b.floor) {
		return false
	}
	b.w.b[b.w.pos]++
	b.w.sumB++
	return true
}

// throttle is client-side adaptive throttling (Google SRE book, "Handling
// Overload", 21.2): it rejects an attempt locally with probability
// max(0, (requests − k·accepts) / (requests + 1)) over a window.
type throttle struct {
	k    float64
	rand func() float64
	w    *window // a: requests, b: accepts
}

// admit decides whether to send an attempt; it counts the attempt as a
// request either way, as the book does, so that rejection probability
// keeps rising while the server refuses.
func (t *throttle) admit(now time.Time) bool {
	if t == nil {
		return true
	}
	req, acc := t.w.add(now, 1, 0)
	// req already counts this attempt; the book's formula is over the
	// requests before it.
	p := (float64(req-1) - t.k*float64(acc)) / float64(req)
	return p <= 0 || t.rand() >= p
}

// accepted counts an attempt the server did not refuse.
func (t *throttle) accepted(now time.Time) {
	if t != nil {
		t.w.add(now, 0, 1)
	}
}
