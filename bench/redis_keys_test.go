//go:build redisbench

package bench_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// numKeys is how many distinct keys the benchmarks spread requests over.
const numKeys = 10_000

// redisKeys are the keys, pregenerated so the loops do not format strings.
var redisKeys = func() []string {
	ks := make([]string, numKeys)
	for i := range ks {
		ks[i] = "user:" + strconv.Itoa(i)
	}
	return ks
}()

// keyPicker draws key indexes uniformly from [0, n) with a PCG seeded per
// goroutine, so goroutines walk different sequences.
type keyPicker struct {
	r *rand.Rand
	n int
}

var pickerSeq atomic.Uint64

func newKeyPicker(n int, seed uint64) *keyPicker {
	return &keyPicker{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), n: n}
}

// nextPicker returns a picker with a seed no other picker of this process
// has.
func nextPicker(n int) *keyPicker { return newKeyPicker(n, pickerSeq.Add(1)) }

func (p *keyPicker) next() int { return p.r.IntN(p.n) }

// TestRedisKeySpread checks that the benchmarks really spread over numKeys
// distinct keys: the key set is distinct, every picker covers all of it
// evenly, and pickers of different goroutines draw different sequences.
func TestRedisKeySpread(t *testing.T) {
	seen := make(map[string]bool, len(redisKeys))
	for _, k := range redisKeys {
		seen[k] = true
	}
	if len(redisKeys) != numKeys || len(seen) != numKeys {
		t.Fatalf("%d keys, %d distinct; want %d", len(redisKeys), len(seen), numKeys)
	}
	const draws = 30 * numKeys // a key is missed with probability e^-30
	firsts := map[[4]int]bool{}
	for seed := range uint64(16) {
		p := newKeyPicker(numKeys, seed+1)
		hits := make([]int, numKeys)
		var first [4]int
		for i := range draws {
			k := p.next()
			if k < 0 || k >= numKeys {
				t.Fatalf("seed %d: index %d out of range", seed, k)
			}
			hits[k]++
			if i < len(first) {
				first[i] = k
			}
		}
		firsts[first] = true
		lo, hi := draws, 0
		for _, h := range hits {
			lo, hi = min(lo, h), max(hi, h)
		}
		// 30 draws per key on average: Poisson(30) stays within [5, 70]
		// for all 10,000 keys with overwhelming probability.
		if lo < 5 || hi > 70 {
			t.Errorf("seed %d: per-key hits in [%d, %d], want within [5, 70]", seed, lo, hi)
		}
	}
	if len(firsts) != 16 {
		t.Errorf("16 pickers began with only %d distinct sequences", len(firsts))
	}
}

// cmdStat is one line of INFO commandstats.
type cmdStat struct {
	calls, usec int64
}

// commandStats reads INFO commandstats.
func commandStats(ctx context.Context, rdb *redis.Client) (map[string]cmdStat, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]cmdStat{}
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var s cmdStat
		for field := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				s.calls = n
			case "usec":
				s.usec = n
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = s
	}
	return out, nil
}

// scriptCommand names the commands that run Lua: scripts and functions.
var scriptCommand = map[string]bool{"eval": true, "evalsha": true, "fcall": true}

// scriptCalls counts the script and function calls of a commandstats
// reading.
func scriptCalls(s map[string]cmdStat) int64 {
	return s["evalsha"].calls + s["eval"].calls + s["fcall"].calls
}

// serverTime is the server's time for the decisions between two
// commandstats readings: EVAL/EVALSHA/FCALL time when scripts or functions
// ran (Redis counts the commands they call in their own lines too, inside
// the caller's time), otherwise the sum over every command, except the
// harness's own (INFO, CONFIG, FLUSHALL, PING, HELLO, CLIENT).
func serverTime(before, after map[string]cmdStat) (usec, calls int64, detail string) {
	ignored := map[string]bool{"info": true, "config|resetstat": true, "flushall": true, "ping": true, "hello": true, "client|setinfo": true, "client|setname": true}
	diff := map[string]cmdStat{}
	for name, a := range after {
		b := before[name]
		if d := (cmdStat{a.calls - b.calls, a.usec - b.usec}); d.calls > 0 && !ignored[name] {
			diff[name] = d
		}
	}
	scripted := scriptCalls(diff) > 0
	var parts []string
	for name, d := range diff {
		parts = append(parts, fmt.Sprintf("%s=%d/%.2fµs", name, d.calls, float64(d.usec)/float64(d.calls)))
		if scripted && !scriptCommand[name] {
			continue
		}
		usec += d.usec
		calls += d.calls
	}
	return usec, calls, strings.Join(parts, " ")
}

// flush empties the server.
func flush(tb testing.TB, rdb *redis.Client) {
	tb.Helper()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		tb.Fatalf("FLUSHALL: %v", err)
	}
}

// warm calls allow once for every key, from 32 goroutines, so that the
// measured loop sees keys that exist, scripts that are loaded and a filled
// connection pool.
func warm(tb testing.TB, allow allowFunc) {
	tb.Helper()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= numKeys {
					return
				}
				if _, err := allow(ctx, redisKeys[i]); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		tb.Fatalf("warm-up: %v", err)
	}
}
