//go:build amd64 || arm64 || loong64 || ppc64 || ppc64le || riscv64 || s390x || mips64 || mips64le || wasm

package memstore

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"pgregory.net/rapid"
)

// TestPackKey: two keys of up to slotKey bytes have the same identity
// words iff they are the same key; the words leave the flags and the
// generation 0 and carry the length.
func TestPackKey(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		gen := rapid.SliceOfN(rapid.Byte(), 0, slotKey)
		a := string(gen.Draw(rt, "a"))
		b := a
		if rapid.Bool().Draw(rt, "other") {
			b = string(gen.Draw(rt, "b"))
		}
		a0, a1 := packKey(a, 0, 0)
		b0, b1 := packKey(b, 0, 0)
		if (a0 == b0 && a1 == b1) != (a == b) {
			t.Fatalf("%q (%#x %#x) and %q (%#x %#x)", a, a0, a1, b, b0, b1)
		}
		if a0&(idFlags|idGen|idDead) != 0 || int(a0&idLen) != len(a)+1 {
			t.Fatalf("%q: word 0 %#x", a, a0)
		}
	})
	long := "a-key-longer-than-the-slot-holds"
	if w0, w1 := packKey(long, 42, 1<<41|5); w0&idLen != idLong || w0>>idKey != 5 || w1 != 42 {
		t.Errorf("long key packed as %#x %#x", w0, w1)
	}
}

// TestSlotRef: a slot's limit, with and without a cold part.
func TestSlotRef(t *testing.T) {
	var e entry
	c := &compiled{lim: sluice.GCRA(sluice.PerSecond(1), 1)}
	e.setRef(c, nil)
	if got, k := e.limit(); got != c || k != nil {
		t.Errorf("limit() = %p, %p; want %p, nil", got, k, c)
	}
	k := &cold{z: 1}
	e.setRef(c, k)
	if got, gk := e.limit(); got != c || gk != k {
		t.Errorf("limit() = %p, %p; want %p, %p", got, gk, c, k)
	}
}

// TestSlotIdentityIsOneOccupant: writers change what one slot holds, under
// its lock, among keys that share their first or last bytes (and a long
// one), each with its own limit, publish a refusal word for each occupant,
// and flip the flags; readers without the lock read the slot as
// Store.refuse does: peek, the clock (here a tick of a logical clock), a
// yield, still. An accepted read is checked against the log of occupants:
// some occupant of the key it asked for, under its limit, with the word it
// read, must have held the slot at some tick between the reader's clock
// and its end. Words are distinct per key in one run and the same for
// every key in the other (as a coarse clock makes them), so that neither
// the word nor the identity alone can vouch for the other. Writers yield
// between the steps of an identity change and readers between their reads
// (step). The test also fails if readers
// never accepted anything. Without the build tag sluicehooks (hooks_off.go)
// it meets fewer of the intermediate states.
func TestSlotIdentityIsOneOccupant(t *testing.T) {
	for _, sameWord := range []bool{false, true} {
		for _, oneLimit := range []bool{false, true} {
			t.Run(fmt.Sprintf("one word %v, one limit %v", sameWord, oneLimit), func(t *testing.T) {
				checkOneOccupant(t, sameWord, oneLimit)
			})
		}
	}
}

// occupant is one publication of a word by what a slot held: from tick
// start (taken before the word was stored) to tick end (taken after it was
// cleared), or to now while end is 0.
type occupant struct {
	key        int
	w          shutWord
	start, end int64
}

func checkOneOccupant(t *testing.T, sameWord, oneLimit bool) {
	// Writers put the first held keys in the slot; readers also ask for
	// the rest, which no writer puts there: the first word of one held
	// key's identity with the second of another (11-byte keys: bytes 0-4,
	// and 3-10).
	const held = 7
	keys := []string{"user:100001", "user:100002", "abc", "abd", "a-key-longer-than-the-slot-holds",
		"abcdefghijk", "vwxdelmnopq", // held
		"abcdelmnopq", "vwxdefghijk", // never held
	}
	limits, words := occupants(len(keys), sameWord, oneLimit)
	var tick atomic.Int64
	var logMu sync.Mutex
	var log []occupant

	var e entry
	const writers, changes = 2, 40_000
	readers := max(2, runtime.GOMAXPROCS(0))
	var done atomic.Bool
	var accepted, wrong atomic.Int64
	var wg sync.WaitGroup
	for r := range readers {
		wg.Go(func() {
			for i := r; !done.Load(); i++ {
				j := i % len(keys)
				w0, w1 := packKey(keys[j], uint64(j), uint64(j))
				w, c, i0, ok := e.peek(w0, w1, &limits[j].lim)
				if !ok {
					runtime.Gosched()
					continue
				}
				from := tick.Load()
				runtime.Gosched()
				if !e.still(w, i0) {
					continue
				}
				to := tick.Load()
				accepted.Add(1)
				logMu.Lock()
				held := false
				// Occupants follow one another (writers hold the lock):
				// look back from the latest to the first that ended
				// before from.
				for k := len(log) - 1; k >= 0 && (log[k].end == 0 || log[k].end >= from); k-- {
					if o := log[k]; o.key == j && o.w == w && o.start <= to {
						held = true
						break
					}
				}
				logMu.Unlock()
				if !held || c != limits[j] {
					wrong.Add(1)
				}
			}
		})
	}
	var ww sync.WaitGroup
	for g := range writers {
		ww.Go(func() {
			// On a loaded machine the readers may not have run yet:
			// the writers go on until one read is accepted, up to 20
			// times as many changes.
			for i := 0; i < changes || accepted.Load() == 0 && i < 20*changes; i++ {
				// Mostly back and forth between two keys whose identity
				// shares its first word (user:...), or whose words
				// combine into a key never held (abcde..., vwxde...).
				j := (i + g) % 2
				switch i % 8 {
				case 4, 5, 6:
					j += 5
				case 7:
					j = 2 + i/8%3
				}
				e.mu.Lock()
				// The occupant leaves: its word is cleared by setIdentity
				// or clear, then its publication ends.
				logMu.Lock()
				last := len(log) - 1
				logMu.Unlock()
				if i%5 == 4 {
					e.clear()
				} else {
					w0, w1 := packKey(keys[j], uint64(j), uint64(j))
					var k *cold
					if j%2 == 1 {
						k = &cold{} // an entry with a cold part is never read without the lock
					}
					e.setIdentity(w0, w1, limits[j], k)
				}
				logMu.Lock()
				if last >= 0 && log[last].end == 0 {
					log[last].end = tick.Add(1)
				}
				logMu.Unlock()
				if i%5 != 4 {
					e.setFlags(idUsed, i%2 == 0)
					logMu.Lock()
					log = append(log, occupant{key: j, w: words[j], start: tick.Add(1)})
					logMu.Unlock()
					e.shut.Store(words[j]) // the occupant publishes its word
					e.setFlags(idPinned, i%3 == 0)
				}
				e.mu.Unlock()
				for range i % 4 {
					runtime.Gosched() // let readers meet the occupant
				}
			}
		})
	}
	ww.Wait()
	done.Store(true)
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Errorf("%d of %d accepted reads were of no occupant that held the slot meanwhile", n, accepted.Load())
	}
	if accepted.Load() == 0 {
		t.Error("no read was accepted: the test did not exercise the protocol")
	}
	t.Logf("%d reads accepted, %d occupants", accepted.Load(), len(log))
}

// occupants returns n keys' limits and refusal words for the tests of the
// reads without a lock: distinct per key, or one limit and one word for
// all.
func occupants(n int, oneWord, oneLimit bool) ([]*compiled, []shutWord) {
	limits := make([]*compiled, n)
	words := make([]shutWord, n)
	for i := range n {
		limits[i] = &compiled{lim: sluice.GCRA(sluice.PerSecond(int64(i+1)), 1)}
		if oneLimit {
			limits[i] = limits[0]
		}
		words[i] = closedWord(int64(1000+i)<<1 | 1)
		if oneWord {
			words[i] = closedWord(1000<<1 | 1)
		}
	}
	return limits, words
}
