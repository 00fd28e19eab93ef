package memstore

import (
	"fmt"
	"hash/maphash"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestKeysAndLimitsKeepApart: every (key, limit identity) has its own state, for
// keys around the inline bound that share prefixes or differ only at the
// end, and for more limits than a shard shares: each admits exactly its
// own count, however many others are in use beside it.
func TestKeysAndLimitsKeepApart(t *testing.T) {
	clk := newClock()
	s := newStore(t, Config{Now: clk.now, Shards: 1, SweepInterval: -1})
	var keys []string
	for _, n := range []int{0, 1, slotKey - 1, slotKey, slotKey + 1, 2 * slotKey, 1000} {
		a := strings.Repeat("k", n)
		keys = append(keys, a)
		if n > 0 {
			keys = append(keys, a[:n-1]+"x") // differs in its last byte
		}
	}
	var limits []sluice.Limit
	for n := int64(1); n <= maxShared+20; n++ {
		limits = append(limits, sluice.FixedWindow(n, time.Minute).WithVersion(uint32(n)))
	}
	for round := 0; round < 2; round++ { // the second finds every state in place
		for _, key := range keys {
			for _, lim := range limits {
				r := sluice.Request{Key: key, Limit: lim, Cost: 1}
				d, err := s.Take(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				// Round 0 takes 1 of each; round 1 takes the rest.
				want := round == 0 || lim.Count >= 2
				if d.Allowed != want {
					t.Fatalf("round %d, key of %d bytes %.8q…, %s: allowed %v, want %v", round, len(key), key, lim, d.Allowed, want)
				}
				if round == 1 {
					for range lim.Count - 2 {
						if d, _ := s.Take(ctx, r); !d.Allowed {
							t.Fatalf("key of %d bytes, %s: refused before its count", len(key), lim)
						}
					}
					if d, _ := s.Take(ctx, r); d.Allowed {
						t.Fatalf("key of %d bytes, %s: admitted past its count", len(key), lim)
					}
				}
			}
		}
	}
	if got, want := s.Len(), len(keys)*len(limits); got != want {
		t.Errorf("Len() = %d, want %d (one state per key and limit)", got, want)
	}
}

// TestLookupUnderOneHash: entries whose keys are longer than a slot holds
// are told apart in it by their hashes; when the first collides, by the
// second. Every (key, limit) of
// TestKeysAndLimitsKeepApart's kind is inserted, the long keys all under
// one hash, as if it collided for all of them (the slot's keys under
// their own: the table finds their place from their bytes). Lookups
// tell them apart before and after some are removed (removal moves the
// others back).
func TestLookupUnderOneHash(t *testing.T) {
	s := newStore(t, Config{Shards: 1, SweepInterval: -1})
	sh := &s.shards[0]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var keys []string
	for _, n := range []int{0, 1, slotKey - 1, slotKey, slotKey + 1, 1000} {
		a := strings.Repeat("k", n)
		keys = append(keys, a)
		if n > 0 {
			keys = append(keys, a[:n-1]+"x")
		}
	}
	hashOf := func(key string) uint64 {
		if len(key) > slotKey {
			return 42
		}
		return s.hash(key)
	}
	limits := []sluice.Limit{sluice.FixedWindow(1, time.Minute), sluice.FixedWindow(2, time.Minute).WithVersion(1), sluice.GCRA(sluice.PerSecond(1), 1)}
	type kl struct{ key, lim int }
	made := map[kl]bool{}
	for i, key := range keys {
		for j, lim := range limits {
			h := hashOf(key)
			if sh.lookup(h, key, &lim) != nil {
				t.Fatalf("key of %d bytes under %s found before it was inserted", len(key), lim)
			}
			c, err := sh.compile(&lim)
			if err != nil {
				t.Fatal(err)
			}
			s.insert(sh, h, key, c).mu.Unlock()
			made[kl{i, j}] = true
		}
	}
	lookAll := func(when string) {
		t.Helper()
		for at := range made {
			key, lim := keys[at.key], limits[at.lim]
			h := hashOf(key)
			w0, w1 := sh.pack(key, h)
			if got := sh.lookup(h, key, &lim); got == nil || !got.holds(w0, w1) || !sameLimit(&got.c().lim, &lim) {
				t.Errorf("%s: key of %d bytes %.8q…, %s: lookup found another entry", when, len(key), key, lim)
			}
			if got, exact := sh.tab.Load().find(h, w0, w1, &lim); got == nil || !exact || !got.holds(w0, w1) {
				t.Errorf("%s: key of %d bytes %.8q…, %s: find found another entry", when, len(key), key, lim)
			} else {
				got.mu.Unlock()
			}
		}
	}
	lookAll("all inserted")
	if len(sh.limits) != len(limits) {
		t.Errorf("shard shares %d compiled limits, want %d", len(sh.limits), len(limits))
	}
	k := 0
	for at := range made {
		if k++; k%2 == 0 {
			continue
		}
		key, lim := keys[at.key], limits[at.lim]
		h := hashOf(key)
		tab := sh.tab.Load()
		e := sh.lookup(h, key, &lim)
		e.mu.Lock()
		s.removeAt(sh, tab, tab.index(e))
		delete(made, at)
		w0, w1 := sh.pack(key, h)
		if e, _ := tab.find(h, w0, w1, &lim); e != nil {
			t.Fatalf("key of %d bytes under %s: a removed entry found live", len(key), lim)
		}
		if sh.lookup(h, key, &lim) != nil {
			t.Fatalf("key of %d bytes under %s found after it was removed", len(key), lim)
		}
	}
	lookAll("half removed")
	if sh.n != len(made) {
		t.Errorf("shard counts %d entries, holds %d", sh.n, len(made))
	}
}

// TestSharedLimitsBounded: a shard shares at most maxShared compiled
// limits however many distinct limits it sees (one computed from client
// input could take any value).
func TestSharedLimitsBounded(t *testing.T) {
	s := newStore(t, Config{Shards: 1, SweepInterval: -1})
	for n := int64(1); n <= 3*maxShared; n++ {
		if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: sluice.FixedWindow(n, time.Minute).WithVersion(uint32(n)), Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(s.shards[0].limits); got != maxShared {
		t.Errorf("shard shares %d compiled limits, want %d", got, maxShared)
	}
	// One key whose limit changes at every request: the limits its state
	// is carried over to are shared and bounded too.
	for n := int64(1); n <= 3*maxShared; n++ {
		if _, err := s.Take(ctx, sluice.Request{Key: "changing", Limit: sluice.FixedWindow(n, time.Minute), Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(s.changed.m); got != maxShared {
		t.Errorf("store shares %d changed limits, want %d", got, maxShared)
	}
}

// TestConcurrentGrowth: goroutines first touch keys at the same time as
// others decide on them, in one shard whose table grows from 8 slots to
// 1024 meanwhile. Lookups without the lock must never create a second
// state for a key: with the clock frozen each key admits exactly its count.
func TestConcurrentGrowth(t *testing.T) {
	clk := newClock()
	s := newStore(t, Config{Shards: 1, Now: clk.now, SweepInterval: -1})
	lim := sluice.FixedWindow(3, time.Hour)
	const keys, goroutines = 600, 8
	var admitted [keys]atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range 2 * keys {
				k := (i*(2*g+1) + g) % keys
				if d, _ := s.Take(ctx, sluice.Request{Key: fmt.Sprint("k", k), Limit: lim, Cost: 1}); d.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for k := range admitted {
		if got := admitted[k].Load(); got != 3 {
			t.Errorf("key %d admitted %d, want exactly 3", k, got)
		}
	}
	checkTables(t, s)
}

// TestConcurrentEviction: goroutines decide on four times more keys than
// the store holds, so that entries are evicted, swept and moved back in
// their tables while others look them up without a lock. Afterwards every
// table is consistent: each entry once, where probing finds it, counted.
func TestConcurrentEviction(t *testing.T) {
	clk := newClock()
	s := newStore(t, Config{MaxKeys: 256, Shards: 4, Now: clk.now, SweepInterval: -1})
	limits := []sluice.Limit{sluice.TokenBucket(sluice.PerSecond(10), 5), sluice.Concurrency(2, time.Minute)}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 5000 {
				k := (i*7919 + g*104729) % 1024
				r := sluice.Request{Key: fmt.Sprint("key-", k), Limit: limits[i%2], Cost: 1}
				d, err := s.Take(ctx, r)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Lease != 0 {
					s.Release(ctx, r, d.Lease)
				}
				if i%64 == 0 {
					clk.advance(time.Millisecond)
				}
				if g == 0 && i%500 == 0 {
					s.sweep()
				}
			}
		})
	}
	wg.Wait()
	if n := s.Len(); n > 256 {
		t.Errorf("holds %d keys, bound 256", n)
	}
	checkTables(t, s)
}

// checkTables checks every shard's table: each (key, limit) at most once,
// found by lookup where it is, none dead, and as many as the shard counts.
func checkTables(t *testing.T, s *Store) {
	t.Helper()
	type kl struct {
		w0  ident // the identity, without flags and generation
		w1  uint64
		lim sluice.Limit
	}
	seen := map[kl]bool{}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		tab, n := sh.tab.Load(), 0
		for j := range tab.slots {
			e := &tab.slots[j]
			if !e.live() {
				continue
			}
			n++
			id := kl{e.id.Load().name(), e.rest.Load(), e.c().lim}
			key, _ := e.key()
			switch {
			case seen[id]:
				t.Errorf("%q under %s held twice", key, id.lim)
			case e.dead():
				t.Errorf("%q under %s in the table but dead", key, id.lim)
			case tab.probe(s.hashOf(e), id.w0, id.w1, &id.lim, false) != e:
				t.Errorf("%q under %s not found where it is", key, id.lim)
			}
			seen[id] = true
		}
		if n != sh.n {
			t.Errorf("shard %d counts %d entries, holds %d", i, sh.n, n)
		}
		sh.mu.Unlock()
	}
}

// TestSameLimitCoversLimit: sameLimit tells apart two limits that differ
// in any one field of sluice.Limit, so that a field added to Limit cannot
// be missed by the lookup's comparison.
func TestSameLimitCoversLimit(t *testing.T) {
	typ := reflect.TypeFor[sluice.Limit]()
	for i := range typ.NumField() {
		var a, b sluice.Limit
		f := reflect.ValueOf(&b).Elem().Field(i)
		switch f.Kind() {
		case reflect.Int64:
			f.SetInt(1)
		case reflect.Uint8, reflect.Uint32:
			f.SetUint(1)
		case reflect.String:
			f.SetString("1")
		default:
			t.Fatalf("sluice.Limit.%s is a %s: teach sameLimit and this test to compare it", typ.Field(i).Name, f.Kind())
		}
		if sameLimit(&a, &b) || sameLimit(&b, &a) {
			t.Errorf("limits that differ in %s compare as the same", typ.Field(i).Name)
		}
		if !sameLimit(&b, &b) {
			t.Errorf("a limit with %s set differs from itself", typ.Field(i).Name)
		}
	}
}

// TestInlineEqual: keys of every length up to past what a slot holds equal
// the entry they were stored in, give it back as its key, and differ from
// any key one byte off, at every position, and from a key one byte longer
// or shorter (the long ones all under one hash, so that their second hash
// tells them apart).
func TestInlineEqual(t *testing.T) {
	c := &compiled{}
	seed := maphash.MakeSeed()
	all := strings.Repeat("abcdefghij", 4)
	for n := 0; n <= slotKey+2; n++ {
		key := all[:n]
		var e entry
		w0, w1 := packKey(key, 7, maphash.String(seed, key))
		e.setIdentity(w0, w1, c, nil)
		has := func(k string) bool {
			w0, w1 := packKey(k, 7, maphash.String(seed, k))
			return e.holds(w0, w1)
		}
		if got, held := e.key(); !has(key) || held != (n <= slotKey) || held && got != key {
			t.Fatalf("%d-byte key differs from itself (stored as %q)", n, got)
		}
		if has(all[:n+1]) || n > 0 && has(key[:n-1]) {
			t.Fatalf("%d-byte key equals a key one byte longer or shorter", n)
		}
		for i := range n {
			other := []byte(key)
			other[i] ^= 0x20
			if has(string(other)) {
				t.Fatalf("%d-byte keys that differ at byte %d compare equal", n, i)
			}
		}
	}
}

// TestShortKeyHash: keys of 8 to 32 bytes, hashed from words, differ
// from keys one bit off at any position and from the same bytes at another
// length; and two stores hash the same key apart. TestHashSpread checks
// how keys spread.
func TestShortKeyHash(t *testing.T) {
	s, err := New(Config{SweepInterval: -1, Resolution: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seen := map[uint64]string{}
	add := func(k string) {
		h := s.hash(k)
		if other, ok := seen[h]; ok && other != k {
			t.Fatalf("%q and %q hash alike (%#x)", k, other, h)
		}
		seen[h] = k
	}
	base := "0123456789abcdefghijklmnopqrstuvw" // 33 bytes: maphash's lengths around the words'
	for n := 7; n <= len(base); n++ {
		add(base[:n])
		add(strings.Repeat("\x00", n))
		for i := range n {
			for bit := range 8 {
				b := []byte(base[:n])
				b[i] ^= 1 << bit
				add(string(b))
			}
		}
	}
	s2, err := New(Config{SweepInterval: -1, Resolution: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s.hash(base) == s2.hash(base) {
		t.Errorf("two stores hash %q alike: the keys are not per store", base)
	}
}

// TestHashSpread: families of keys that differ in a few characters (user
// IDs, IPv4 addresses, a policy's keys of a rule, a limit and an address:
// 11, 8 to 15 and 17 to 24 bytes) spread over the shards and over a
// table's slots as uniformly as chance allows, for every store's keys. A
// hash whose output keeps its input's structure spreads them too evenly for
// most of the store's random keys and very unevenly for a few: one mix of
// the two words of an 11-byte key did both (in 1,000 stores, the standard
// deviation of 64 shards' counts of 100,000 keys went from 10 to 189, where
// chance gives 39), and a shard at twice its share evicts keys while the
// store is half full. So the test measures the spread in 31 stores and
// bounds their median and their worst.
func TestHashSpread(t *testing.T) {
	const keys, buckets, stores = 100_000, 64, 31
	families := map[string]func(i int) string{
		"user":   func(i int) string { return fmt.Sprintf("user:%d", 100_000+i) },
		"ipv4":   func(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255) },
		"policy": func(i int) string { return fmt.Sprintf("api/per-ip/10.%d.%d.%d", i>>16, i>>8&255, i&255) },
	}
	// Chance puts n/64 keys in each bucket, with a standard deviation of
	// sigma across the buckets; a store's measured deviation varies by about
	// sigma/11 from store to store.
	sigma := math.Sqrt(keys / buckets * (1 - 1.0/buckets))
	for name, key := range families {
		ks := make([]string, keys)
		for i := range ks {
			ks[i] = key(i)
		}
		var shardSD, slotSD []float64
		for range stores {
			s, err := New(Config{SweepInterval: -1, Resolution: -1})
			if err != nil {
				t.Fatal(err)
			}
			var shard, slot [buckets]float64
			for _, k := range ks {
				h := s.hash(k)
				shard[h>>58]++ // the top bits, as shardOf with 64 shards
				slot[h&(buckets-1)]++
			}
			s.Close()
			shardSD, slotSD = append(shardSD, deviation(shard[:])), append(slotSD, deviation(slot[:]))
		}
		for what, sds := range map[string][]float64{"shards": shardSD, "slots": slotSD} {
			slices.Sort(sds)
			med, worst := sds[len(sds)/2], sds[len(sds)-1]
			if med < 0.85*sigma || med > 1.15*sigma || worst > 2*sigma {
				t.Errorf("%s keys over %d %s: the deviation of the counts is %.0f at the median of %d stores and %.0f at worst; chance gives %.0f",
					name, buckets, what, med, stores, worst, sigma)
			}
		}
	}
}

// deviation is the standard deviation of counts around their mean.
func deviation(counts []float64) float64 {
	var sum, sq float64
	for _, c := range counts {
		sum += c
	}
	mean := sum / float64(len(counts))
	for _, c := range counts {
		sq += (c - mean) * (c - mean)
	}
	return math.Sqrt(sq / float64(len(counts)))
}

// TestConcurrentChecksMoveEntries: checks of several keys (TakeAll) that
// create keys, are refused or fail, while other goroutines decide, reset
// and sweep keys in the same shard, whose table grows and moves entries
// back on every removal meanwhile. A hot key shared by every check and
// decision, under a frozen clock, admits exactly its count; keys a failed
// or refused check created are gone; the table is consistent.
func TestConcurrentChecksMoveEntries(t *testing.T) {
	clk := newClock()
	s := newStore(t, Config{Shards: 1, Now: clk.now, SweepInterval: -1})
	hot := sluice.FixedWindow(500, time.Hour)
	generous := sluice.TokenBucket(sluice.PerSecond(1_000_000), 1_000_000)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := range 1500 {
				k := fmt.Sprint("k", (i*31+g*17)%400)
				switch i % 4 {
				case 0, 1: // a check of the hot key and a new or held key, failing one time in three
					rs := []sluice.Request{{Key: "hot", Limit: hot, Cost: 1}, {Key: k, Limit: generous, Cost: 1}}
					if i%3 == 0 {
						rs = append(rs, sluice.Request{Key: "bad" + k, Limit: generous, Cost: 1, MaxDelay: -1})
					}
					ds := make([]sluice.Decision, len(rs))
					err := s.TakeAll(ctx, rs, ds)
					if err == nil && ds[0].Allowed {
						admitted.Add(1)
					}
				case 2:
					if d, _ := s.Take(ctx, sluice.Request{Key: "hot", Limit: hot, Cost: 1}); d.Allowed {
						admitted.Add(1)
					}
					s.Take(ctx, sluice.Request{Key: k, Limit: generous, Cost: 1})
				case 3:
					s.Reset(ctx, sluice.Request{Key: k, Limit: generous})
					if g == 0 && i%100 == 3 {
						s.sweep()
					}
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 500 {
		t.Errorf("hot key admitted %d, want exactly its count, 500", got)
	}
	sh := &s.shards[0]
	sh.mu.Lock()
	for i := range 400 {
		key := fmt.Sprint("badk", i)
		h := s.hash(key)
		if sh.lookup(h, key, &generous) != nil {
			t.Errorf("%s, created by a failed check, still held", key)
		}
	}
	sh.mu.Unlock()
	checkTables(t, s)
}

// Views of an entry for the tests.

// c returns the entry's limit.
func (e *entry) c() *compiled {
	c, _ := e.limit()
	return c
}

// key returns the entry's key, if it is held in the slot (false for a
// longer key: the slot holds its hashes). Under the shard's lock or the
// slot's.
func (e *entry) key() (string, bool) {
	var b [slotKey]byte
	kb := e.keyBytes(&b)
	return string(kb), kb != nil
}

// dead reports whether markDead marked the entry.
func (e *entry) dead() bool { return e.id.Load()&idDead != 0 }
