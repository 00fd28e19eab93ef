package memstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"pgregory.net/rapid"
)

// takeGeneric is Take by the generic path alone: find, then takeChanged
// under the key's lock (takeSlow), or takeLocked under the shard's for a
// key find did not find; no home-slot shortcut, no hint, no refusal
// without the lock, decide and timeOf called rather than written out.
func (s *Store) takeGeneric(r *sluice.Request) (sluice.Decision, error) {
	if s.closed.Load() {
		return sluice.Decision{}, sluice.ErrClosed
	}
	h := s.hash(r.Key)
	sh := &s.shards[s.shardOf(h)]
	w0, w1 := sh.pack(r.Key, h)
	e, _ := sh.tab.Load().find(h, w0, w1, &r.Limit)
	return s.takeSlow(sh, h, e, r)
}

// fastKeys are the trace test's keys: more than a first table's slots, in
// one shard, so that keys sit out of their home slots and tables grow;
// held in the slot and longer.
var fastKeys = []string{
	"a", "b", "user:100001", "user:100002", "user:100003", "192.168.100.200", "10.0.0.1",
	"a-key-longer-than-twenty-eight-bytes-in-all", "another-key-longer-than-a-slot", "k",
}

// fastLimits adds to refuseLimits (the buckets refused without the lock,
// a changed limit, a fixed window) a cold part and a log.
var fastLimits = append([]sluice.Limit{
	sluice.SlidingWindow(4, time.Second),
	sluice.SlidingLog(3, time.Second),
	sluice.LeakyBucket(sluice.Per(4, time.Second), 2),
}, refuseLimits...)

// TestTakeFastPathIsGeneric: Take's hand-inlined path (the home slot
// without find, decide and timeOf written out, the hint and the refusal
// without the lock) gives the decisions and leaves the state of the
// generic path (takeGeneric) over random traffic on one test clock:
// requests of every cost and bad ones on keys in and out of their home
// slots, changed limits, TakeAll, Adjust, Reset, the clock moving with
// and, in the coarse case, without the coarse reading. After every
// operation each key's state, limit and used flag are the same in both
// stores, and its refusal word is the same or, in the inlined path, open
// where the generic one's refuses (the inlined path publishes after an
// admission only when a word was set: an open word is always right); a
// mark the reading has passed counts as open (passedMark).
func TestTakeFastPathIsGeneric(t *testing.T) {
	for _, coarse := range []bool{false, true} {
		t.Run(fmt.Sprint("coarse ", coarse), func(t *testing.T) { checkFastIsGeneric(t, coarse) })
	}
}

func checkFastIsGeneric(t *testing.T, coarse bool) {
	var words, unlocked int
	rapid.Check(t, func(rt *rapid.T) {
		c := newClock()
		fast := newStore(t, Config{SweepInterval: -1, Shards: 1, Now: c.now})
		generic := newStore(t, Config{SweepInterval: -1, Shards: 1, Now: c.now})
		both := []*Store{fast, generic}
		for _, s := range both {
			s.given = false // publish words, as with the monotonic clock
			s.ticking = coarse
		}
		advance := func(d time.Duration, moveCoarse bool) {
			c.advance(d)
			for _, s := range both {
				if coarse && moveCoarse {
					s.coarse.Store(readAt(c.us.Load()))
				}
			}
		}
		advance(0, true)
		focus := refuseLimits[0]
		if coarse {
			focus = refuseLimits[5] // refusals of up to 3 s: a second's margin leaves some to the word
		}
		for i := range rapid.IntRange(1, 300).Draw(rt, "ops") {
			switch op := rapid.IntRange(0, 15).Draw(rt, "op"); op {
			case 0:
				advance(time.Duration(rapid.Int64Range(0, 3_000_000).Draw(rt, "µs"))*time.Microsecond, true)
			case 1:
				advance(time.Duration(rapid.Int64Range(0, 20_000).Draw(rt, "µs"))*time.Microsecond, rapid.Bool().Draw(rt, "coarse moves"))
			case 2:
				rs := []sluice.Request{drawFastRequest(rt, focus), drawFastRequest(rt, focus)}
				a, b := make([]sluice.Decision, 2), make([]sluice.Decision, 2)
				errA, errB := fast.TakeAll(ctx, rs, a), generic.TakeAll(ctx, rs, b)
				sameTrace(rt, i, "TakeAll", fmt.Sprint(a, errA), fmt.Sprint(b, errB))
			case 3:
				r := drawFastRequest(rt, focus)
				r.Cost = rapid.Int64Range(-2, 2).Draw(rt, "delta")
				a, errA := fast.Adjust(ctx, r)
				b, errB := generic.Adjust(ctx, r)
				sameTrace(rt, i, "Adjust", fmt.Sprint(a, errA), fmt.Sprint(b, errB))
			case 4:
				r := drawFastRequest(rt, focus)
				sameTrace(rt, i, "Reset", fmt.Sprint(fast.Reset(ctx, r)), fmt.Sprint(generic.Reset(ctx, r)))
			default:
				r := drawFastRequest(rt, focus)
				if rapid.IntRange(0, 7).Draw(rt, "odd cost") == 0 {
					r.Cost = rapid.Int64Range(-1, 4).Draw(rt, "cost")
				}
				if rapid.IntRange(0, 15).Draw(rt, "bad delay") == 0 {
					r.MaxDelay = -time.Second
				}
				if wordRefuses(fast, r) {
					unlocked++
				}
				a, errA := fast.Take(ctx, r)
				b, errB := generic.takeGeneric(&r)
				sameTrace(rt, i, fmt.Sprintf("Take %+v", r), fmt.Sprint(a, errA), fmt.Sprint(b, errB))
			}
			for _, key := range fastKeys {
				for _, lim := range fastLimits {
					a, wa := slotState(fast, key, lim)
					b, wb := slotState(generic, key, lim)
					wa, wb = passedMark(fast, wa), passedMark(generic, wb)
					sameTrace(rt, i, fmt.Sprintf("state of %q under %s", key, lim), a, b)
					if wa != wb && !(wa == shutOpen && wb.refusing()) {
						rt.Fatalf("op %d, word of %q under %s: inlined %d, generic %d", i, key, lim, wa, wb)
					}
					if wa.refusing() {
						words++
					}
				}
			}
		}
	})
	if words == 0 || unlocked == 0 {
		t.Fatalf("%d refusing words, %d requests refused without the lock: the test exercised too little", words, unlocked)
	}
	t.Logf("%d refusing words seen, %d requests refused without the lock", words, unlocked)
}

// drawFastRequest draws a request of cost 1, half the time on one key
// under the limit focus, so that keys are exhausted and refused.
func drawFastRequest(rt *rapid.T, focus sluice.Limit) sluice.Request {
	r := sluice.Request{Key: fastKeys[2], Limit: focus, Cost: 1}
	if rapid.Bool().Draw(rt, "other") {
		r.Key = rapid.SampledFrom(fastKeys).Draw(rt, "key")
		r.Limit = rapid.SampledFrom(fastLimits).Draw(rt, "limit")
	}
	return r
}

// slotState renders the state s holds for key under lim's identity (its
// limit, algo.State and used flag), and returns its refusal word.
func slotState(s *Store, key string, lim sluice.Limit) (string, shutWord) {
	h := s.hash(key)
	sh := &s.shards[s.shardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.lookup(h, key, &lim)
	if e == nil {
		return "none", shutOpen
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	c, k := e.limit()
	var st algo.State
	e.load(&st, k)
	return fmt.Sprintf("%s %+v used %v", c.lim, st, e.used()), e.shut.Load()
}

// passedMark is w, or open for an ahead word whose time the store's reading
// has reached: the next decision clears it (Store.ahead), and until then
// it means what an open word does. The inlined path leaves one on a
// request it rejects before it reads the time; takeChanged reads the time
// first.
func passedMark(s *Store, w shutWord) shutWord {
	if t, ahead := w.ahead(); ahead && t <= s.now() {
		return shutOpen
	}
	return w
}

func sameTrace(rt *rapid.T, i int, what, got, want string) {
	if got != want {
		rt.Fatalf("op %d, %s:\ninlined path %s\ngeneric path %s", i, what, got, want)
	}
}
