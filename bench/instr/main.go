// Command instr runs n decisions of one library on the benchmark's keys,
// for counting instructions and cache misses with valgrind (see
// instr.sh): the count of a run of 300,000 minus one of 100,000, divided
// by 200,000, is the cost of one decision, with the warm-up and start-up
// subtracted. The loop is BenchmarkAllow's serial loop without the testing
// package: the same keys, the same xorshift draws, one call of the
// library's own API per decision.
//
//	instr LIB KEYS N PATH
//
// LIB is sluice (memstore's default clock), sluice-exact (a clock reading
// per decision) or sethvargo; KEYS is 1 or 100000; PATH is allowed or
// refused. sluice runs without its sweeper, so that only decisions run
// while the count is taken.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	sethvargomem "github.com/sethvargo/go-limiter/memorystore"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: instr sluice|sluice-exact|sethvargo KEYS N allowed|refused")
		os.Exit(2)
	}
	nk, err1 := strconv.Atoi(os.Args[2])
	n, err2 := strconv.Atoi(os.Args[3])
	if err1 != nil || err2 != nil || nk < 1 {
		fmt.Fprintln(os.Stderr, "instr: KEYS and N are numbers")
		os.Exit(2)
	}
	keys := make([]string, nk)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(100_000+i)
	}
	allow, err := library(os.Args[1], os.Args[4] == "refused")
	if err != nil {
		fmt.Fprintln(os.Stderr, "instr:", err)
		os.Exit(2)
	}
	for _, k := range keys { // warm-up, each key a copy, as in BenchmarkAllow
		allow(strings.Clone(k))
	}
	fmt.Println(loop(allow, keys, n), "admitted")
}

// library returns one decision of lib, under the benchmark's generous
// limit or its strict one.
func library(lib string, strict bool) (func(string) bool, error) {
	ctx := context.Background()
	switch lib {
	case "sluice", "sluice-exact":
		cfg := memstore.Config{MaxKeys: 1 << 18, SweepInterval: -1}
		if lib == "sluice-exact" {
			cfg.Resolution = -1
		}
		st, err := memstore.New(cfg)
		if err != nil {
			return nil, err
		}
		l := sluice.New(st)
		lim := sluice.TokenBucket(sluice.PerSecond(1e9), 1e9)
		if strict {
			lim = sluice.TokenBucket(sluice.Per(1, time.Hour), 1)
		}
		return func(k string) bool { d, _ := l.Allow(ctx, k, lim); return d.Allowed }, nil
	case "sethvargo":
		tokens := uint64(1 << 30)
		if strict {
			tokens = 1
		}
		st, err := sethvargomem.New(&sethvargomem.Config{Tokens: tokens, Interval: time.Hour})
		if err != nil {
			return nil, err
		}
		return func(k string) bool { _, _, _, ok, _ := st.Take(ctx, k); return ok }, nil
	}
	return nil, fmt.Errorf("unknown library %q", lib)
}

// loop makes n decisions on keys drawn as BenchmarkAllow's serial loop
// draws them, and returns how many were admitted.
func loop(allow func(string) bool, keys []string, n int) int {
	admitted := 0
	x := uint64(0x9e3779b97f4a7c15)
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		if allow(keys[(x>>32)*uint64(len(keys))>>32]) {
			admitted++
		}
	}
	return admitted
}
