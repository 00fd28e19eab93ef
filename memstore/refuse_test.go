package memstore

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"pgregory.net/rapid"
)

// refuseKeys are the keys of the refusal tests: held in the slot as they
// are (up to slotKey bytes), and longer ones, identified in the slot by
// their hashes (both refused without the lock).
var refuseKeys = []string{"a", "user:100001", "192.168.100.200", "user:100001", "a-key-longer-than-twenty-eight-bytes-in-all"}

// refuseLimits are their limits: token_bucket and gcra, which refuse
// without the lock, each its own state (Version); a changed token_bucket
// (another count under the first's identity: the state is carried over,
// and the key refuses only under its lock from then on); and a fixed
// window, which never refuses without it.
var refuseLimits = []sluice.Limit{
	sluice.TokenBucket(sluice.Per(3, time.Second), 3),
	sluice.TokenBucket(sluice.Per(3, time.Second), 3),
	sluice.TokenBucket(sluice.Per(3, time.Second), 3),
	sluice.TokenBucket(sluice.Per(5, time.Second), 2),
	sluice.GCRA(sluice.Per(2, time.Second), 5).WithVersion(1),
	sluice.GCRA(sluice.Per(1, 3*time.Second), 1).WithVersion(2),
	sluice.TokenBucket(sluice.Per(7, 10*time.Second), 4).WithVersion(3),
	sluice.FixedWindow(3, time.Second),
}

// TestRefuseIsTheLockedDecision: a store that refuses without the lock
// answers every request exactly as one that decides everything under it
// (Config.Now: it publishes no word) over random traffic: requests of
// every cost, bad ones, checks of several limits, adjustments both ways,
// resets and changed limits. Both read one test clock that only goes
// forward; the subject is told it is its own (given false), as the
// monotonic clock is, and in the coarse case that it ticks, its coarse
// reading moved by hand with the clock (so rechecks, marks and the word's
// second's margin run). It also counts the requests the word refused, so
// that a run that never exercised it fails.
func TestRefuseIsTheLockedDecision(t *testing.T) {
	for _, coarse := range []bool{false, true} {
		t.Run(fmt.Sprint("coarse ", coarse), func(t *testing.T) { checkRefuseIsLocked(t, coarse) })
	}
}

func checkRefuseIsLocked(t *testing.T, coarse bool) {
	var fast atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		c := newClock()
		subject := newStore(t, Config{SweepInterval: -1, Now: c.now})
		subject.given = false
		advance := func(d time.Duration) {
			c.advance(d)
			if coarse {
				subject.coarse.Store(readAt(c.us.Load()))
			}
		}
		if coarse {
			subject.ticking = true
			advance(0)
		}
		locked := newStore(t, Config{SweepInterval: -1, Now: c.now})
		focus := refuseLimits[0]
		if coarse {
			focus = refuseLimits[5] // refusals of up to 3 s: a second's margin leaves some to the word
		}
		for i := range rapid.IntRange(1, 200).Draw(rt, "ops") {
			switch op := rapid.IntRange(0, 13).Draw(rt, "op"); op {
			case 0:
				advance(time.Duration(rapid.Int64Range(0, 3_000_000).Draw(rt, "µs")) * time.Microsecond)
			case 1:
				advance(time.Duration(rapid.Int64Range(0, 20_000).Draw(rt, "µs")) * time.Microsecond)
			case 2:
				rs := []sluice.Request{drawRefuseRequest(rt, focus), drawRefuseRequest(rt, focus)}
				a, b := make([]sluice.Decision, 2), make([]sluice.Decision, 2)
				errA, errB := subject.TakeAll(ctx, rs, a), locked.TakeAll(ctx, rs, b)
				sameAnswer(rt, i, "TakeAll", fmt.Sprint(a, errA), fmt.Sprint(b, errB))
			case 3:
				r := drawRefuseRequest(rt, focus)
				r.Cost = rapid.Int64Range(-2, 2).Draw(rt, "delta")
				a, errA := subject.Adjust(ctx, r)
				b, errB := locked.Adjust(ctx, r)
				sameAnswer(rt, i, "Adjust", fmt.Sprint(a, errA), fmt.Sprint(b, errB))
			case 4:
				r := drawRefuseRequest(rt, focus)
				sameAnswer(rt, i, "Reset", fmt.Sprint(subject.Reset(ctx, r)), fmt.Sprint(locked.Reset(ctx, r)))
			default:
				r := drawRefuseRequest(rt, focus)
				if rapid.IntRange(0, 7).Draw(rt, "odd cost") == 0 {
					r.Cost = rapid.Int64Range(-1, 4).Draw(rt, "cost")
				}
				if rapid.IntRange(0, 15).Draw(rt, "bad delay") == 0 {
					r.MaxDelay = -time.Second
				}
				if wordRefuses(subject, r) {
					fast.Add(1)
				}
				a, errA := subject.Take(ctx, r)
				b, errB := locked.Take(ctx, r)
				sameAnswer(rt, i, fmt.Sprintf("Take %+v", r), fmt.Sprint(a, errA), fmt.Sprint(b, errB))
			}
		}
	})
	if fast.Load() == 0 {
		t.Fatal("no request was refused without the lock: the test exercised nothing")
	}
	t.Logf("%d requests refused without the lock", fast.Load())
}

// drawRefuseRequest draws a request of cost 1, half the time on one key
// under the limit focus, so that keys are exhausted and refused.
func drawRefuseRequest(rt *rapid.T, focus sluice.Limit) sluice.Request {
	r := sluice.Request{Key: refuseKeys[1], Limit: focus, Cost: 1}
	if rapid.Bool().Draw(rt, "other") {
		r.Key = rapid.SampledFrom(refuseKeys).Draw(rt, "key")
		r.Limit = rapid.SampledFrom(refuseLimits).Draw(rt, "limit")
	}
	return r
}

func sameAnswer(rt *rapid.T, i int, what, got, want string) {
	if got != want {
		rt.Fatalf("op %d, %s:\nrefusing without the lock %s\nalways under it           %s", i, what, got, want)
	}
}

// wordRefuses reports whether r's entry, in its home slot with the hint,
// holds a word that refuses r at the store's time now.
func wordRefuses(s *Store, r sluice.Request) bool {
	e, hinted := homeOf(s, r.Key)
	if e == nil || !hinted || e.c() == nil || r.Cost != 1 || r.MaxDelay < 0 || !sameLimit(&e.c().lim, &r.Limit) {
		return false
	}
	w := e.shut.Load()
	if s.ticking {
		return w.refusing() && w.opensAt()-s.now() >= int64(recheckBelow/time.Microsecond)
	}
	return w.refusing() && w.opensAt() > s.now()
}

// TestRefuseTakesNoLock: a refused request of cost 1 is answered while
// another goroutine holds its key's lock, with the lock's answer; a
// request the word does not cover (cost 2) waits for the lock.
func TestRefuseTakesNoLock(t *testing.T) {
	for _, lim := range []sluice.Limit{sluice.TokenBucket(sluice.Per(1, time.Hour), 1), sluice.GCRA(sluice.Per(1, time.Hour), 2)} {
		for _, res := range []time.Duration{-1, 0} {
			t.Run(fmt.Sprint(lim.Algorithm, " resolution ", res), func(t *testing.T) {
				s := newStore(t, Config{SweepInterval: -1, Resolution: res})
				r := sluice.Request{Key: "user:100001", Limit: lim, Cost: 1}
				for {
					if d, _ := s.Take(ctx, r); !d.Allowed {
						break
					}
				}
				h := s.hash(r.Key)
				e := s.shards[s.shardOf(h)].lookup(h, r.Key, &lim)
				e.mu.Lock()
				done := make(chan sluice.Decision)
				go func() { d, _ := s.Take(ctx, r); done <- d }()
				select {
				case d := <-done:
					if d.Allowed || d.Remaining != 0 || d.RetryAfter < 59*time.Minute || d.ResetAfter < d.RetryAfter || d.Limit != lim.Capacity() {
						t.Fatalf("refused without the lock: %+v", d)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("a request its key refuses waited 10 s for the key's lock")
				}
				two := make(chan sluice.Decision)
				go func() { d, _ := s.Take(ctx, sluice.Request{Key: r.Key, Limit: lim, Cost: 2}); two <- d }()
				waitBlockedOnLock(t)
				e.mu.Unlock()
				if d := <-two; d.Allowed {
					t.Fatalf("cost 2: %+v", d)
				}
			})
		}
	}
}

// TestRefusedKeyKeptFromEviction: a key whose requests are refused without
// its lock is still used, as one decided under it: while other keys come
// and go past the bound, the eviction hand keeps passing it over, so its
// limit is never forgotten and its client never admitted again.
func TestRefusedKeyKeptFromEviction(t *testing.T) {
	s := newStore(t, Config{SweepInterval: -1, MaxKeys: 16, Shards: 1})
	lim := sluice.TokenBucket(sluice.Per(1, time.Hour), 1)
	hot := sluice.Request{Key: "hot", Limit: lim, Cost: 1}
	if d, _ := s.Take(ctx, hot); !d.Allowed {
		t.Fatalf("first request: %+v", d)
	}
	for i := range 2000 {
		if _, err := s.Take(ctx, sluice.Request{Key: fmt.Sprint("spray-", i), Limit: lim, Cost: 1}); err != nil {
			t.Fatal(err)
		}
		if d, _ := s.Take(ctx, hot); d.Allowed {
			t.Fatalf("the refused key was admitted again after %d other keys: it was evicted", i+1)
		}
	}
}

// TestRefuseUnderRefunds: goroutines flood a key that is exhausted for a
// day while another refunds it one unit at a time: each refund opens it
// for exactly one request, which the word must not hide, so that in the end
// exactly burst + refunds requests were admitted, no more and no fewer.
// Under -race it checks what refuse reads without the lock.
func TestRefuseUnderRefunds(t *testing.T) {
	for _, lim := range []sluice.Limit{sluice.TokenBucket(sluice.Per(10, 24*time.Hour), 10), sluice.GCRA(sluice.Per(10, 24*time.Hour), 10)} {
		t.Run(lim.Algorithm.String(), func(t *testing.T) {
			s := newStore(t, Config{SweepInterval: -1})
			r := sluice.Request{Key: "user:100001", Limit: lim, Cost: 1}
			const refunds = 200
			var admitted atomic.Int64
			var stop atomic.Bool
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for i := 0; !stop.Load(); i++ {
						if d, err := s.Take(ctx, r); err != nil {
							t.Error(err)
							return
						} else if d.Allowed {
							admitted.Add(1)
						}
						if i%16 == 0 {
							runtime.Gosched() // let the refunding goroutine run on a loaded machine
						}
					}
				})
			}
			// waitFor waits until n requests were admitted: a refund the
			// word hid would never be, and the test then fails at the
			// deadline instead of hanging.
			deadline := time.Now().Add(60 * time.Second)
			waitFor := func(n int64) bool {
				for admitted.Load() < n {
					if time.Now().After(deadline) {
						return false
					}
					runtime.Gosched()
				}
				return true
			}
			ok := true
			for i := range refunds {
				if ok = waitFor(int64(10 + i)); !ok {
					break
				}
				if _, err := s.Adjust(ctx, sluice.Request{Key: r.Key, Limit: lim, Cost: -1}); err != nil {
					t.Error(err)
					break
				}
			}
			ok = ok && waitFor(10+refunds)
			stop.Store(true)
			wg.Wait()
			if !ok {
				t.Fatalf("after 60 s only %d admitted of burst 10 and the refunds made: a refund was not seen", admitted.Load())
			}
			for {
				d, _ := s.Take(ctx, r)
				if !d.Allowed {
					break
				}
				admitted.Add(1)
			}
			if got := admitted.Load(); got != 10+refunds {
				t.Fatalf("%d admitted, want exactly %d (burst 10 + %d refunds)", got, 10+refunds, refunds)
			}
		})
	}
}

// TestHintsPerSlot: a table's hints are one bit per slot, set and cleared
// alone.
func TestHintsPerSlot(t *testing.T) {
	tab := newTable(256)
	for _, i := range []uint64{0, 1, 63, 64, 65, 255} {
		tab.hint(i, true)
		for j := range uint64(256) {
			if tab.hinted(j) != (j == i) {
				t.Fatalf("slot %d hinted: slot %d reads %v", i, j, tab.hinted(j))
			}
		}
		tab.hint(i, false)
		if tab.hinted(i) {
			t.Fatalf("slot %d: hint not cleared", i)
		}
	}
}

// homeOf returns key's entry if it is in its home slot, and the slot's
// hint.
func homeOf(s *Store, key string) (*entry, bool) {
	h := s.hash(key)
	t := s.shards[s.shardOf(h)].tab.Load()
	i := h & t.mask()
	e := &t.slots[i]
	w0, w1 := s.shards[s.shardOf(h)].pack(key, h)
	if !e.live() || !e.holds(w0, w1) {
		return nil, false
	}
	return e, t.hinted(i)
}

// TestWordOnlyWhereRefuseAnswers: with the coarse clock, a refusal less
// than a second away is decided again at the exact time under the lock,
// so its key publishes no word and its slot no hint (Take would read the
// word first for nothing, fetching a line two cores take turns to write);
// a refusal an hour away publishes both.
func TestWordOnlyWhereRefuseAnswers(t *testing.T) {
	for _, tc := range []struct {
		lim  sluice.Limit
		word bool
	}{
		{sluice.TokenBucket(sluice.Per(10, time.Second), 1), false},
		{sluice.TokenBucket(sluice.Per(1, time.Hour), 1), true},
	} {
		s := newStore(t, Config{SweepInterval: -1, Resolution: time.Hour})
		r := sluice.Request{Key: "user:100001", Limit: tc.lim, Cost: 1}
		for range 3 {
			s.Take(ctx, r)
		}
		e, hinted := homeOf(s, r.Key)
		if got := e.shut.Load() > 0; got != tc.word || hinted != tc.word {
			t.Errorf("%s refused: word %d, hint %v; want both %v", tc.lim, e.shut.Load(), hinted, tc.word)
		}
	}
}
