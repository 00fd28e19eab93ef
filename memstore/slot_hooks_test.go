//go:build sluicehooks && (amd64 || arm64 || loong64 || ppc64 || ppc64le || riscv64 || s390x || mips64 || mips64le || wasm)

package memstore

import (
	"fmt"
	"math/bits"
	"testing"
)

// actor is a goroutine whose steps (step, at the hooks) a test schedules.
type actor struct {
	turn chan struct{} // the actor may run its next segment
	back chan bool     // it paused at a step (false) or finished (true)
	done bool
}

func newActor(run func()) *actor {
	a := &actor{turn: make(chan struct{}), back: make(chan bool)}
	go func() {
		<-a.turn
		run()
		a.back <- true
	}()
	return a
}

// TestSlotInterleavings: every interleaving of one identity change of a
// slot (and its new occupant's word) with one read without the lock (peek,
// the clock, still), for changes between keys whose identities share
// their first word, between keys whose words combine into a key never
// held, and to empty; for every key asked for; with words and limits
// distinct per key or one for all. An accepted read must be of the key
// asked for, with its word and limit, held at some step between the
// reader's clock and its second read of the word: the old occupant if the
// change had not cleared its word when the clock was read, the new one if
// its word was published before the reader read it again.
func TestSlotInterleavings(t *testing.T) {
	keys := []string{"abcdefghijk", "vwxdelmnopq", "abcdelmnopq", "vwxdefghijk", "user:100001", "user:100002"}
	changes := [][2]int{{0, 1}, {1, 0}, {4, 5}, {5, 4}, {0, -1}}
	var cur *actor
	tick := 0
	stepHook = func() {
		a := cur
		if a == nil { // the test's own setup
			return
		}
		a.back <- false
		<-a.turn
	}
	defer func() { stepHook = nil }()

	accepted, schedules := 0, 0
	for _, oneWord := range []bool{false, true} {
		for _, oneLimit := range []bool{false, true} {
			limits, words := occupants(len(keys), oneWord, oneLimit)
			for _, ch := range changes {
				from, to := ch[0], ch[1]
				for q := range keys {
					const segments = 12 // at most 6 of each actor
					for mask := uint(0); mask < 1<<segments; mask++ {
						if bits.OnesCount(mask) != segments/2 {
							continue
						}
						schedules++
						var e entry
						cur = nil
						w0, w1 := packKey(keys[from], 0, 0)
						e.setIdentity(w0, w1, limits[from], nil)
						e.shut.Store(words[from])

						clearedAt, publishedAt := -1, -1
						writer := newActor(func() {
							clearedAt = tick // setIdentity clears the word in its first segment
							if to < 0 {
								e.clear()
								return
							}
							w0, w1 := packKey(keys[to], 0, 0)
							e.setIdentity(w0, w1, limits[to], nil)
							step()
							publishedAt = tick
							e.shut.Store(words[to])
						})
						var ok bool
						var w shutWord
						var c *compiled
						clockAt, rereadAt := -1, -1
						reader := newActor(func() {
							w0, w1 := packKey(keys[q], 0, 0)
							var i0 ident
							w, c, i0, ok = e.peek(w0, w1, &limits[q].lim)
							if !ok {
								return
							}
							clockAt = tick // the clock is read after peek
							step()
							rereadAt = tick // still reads the word again first
							ok = e.still(w, i0)
						})
						actors := []*actor{reader, writer}
						for tick = 0; !(reader.done && writer.done); tick++ {
							a := actors[mask>>(tick%segments)&1]
							if tick >= segments || a.done {
								a = actors[0]
								if a.done {
									a = actors[1]
								}
							}
							cur = a
							a.turn <- struct{}{}
							a.done = <-a.back
						}
						if !ok {
							continue
						}
						accepted++
						held := q == from && w == words[from] && c == limits[from] && clearedAt > clockAt ||
							to >= 0 && q == to && w == words[to] && c == limits[to] && publishedAt >= 0 && publishedAt < rereadAt
						if !held {
							t.Fatalf("one word %v, one limit %v, %q -> %s, schedule %012b: a read of %q accepted word %d and limit %p, of no occupant that held the slot (cleared at step %d, published at %d, clock at %d, word read again at %d)",
								oneWord, oneLimit, keys[from], fmt.Sprint(to), mask, keys[q], w, c, clearedAt, publishedAt, clockAt, rereadAt)
						}
					}
				}
			}
		}
	}
	if accepted == 0 {
		t.Fatal("no read was accepted: the test did not exercise the protocol")
	}
	t.Logf("%d schedules, %d reads accepted", schedules, accepted)
}
