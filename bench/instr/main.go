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
// per decision), sluice-take (Store.Take with a Request built once, not
// Limiter.Allow: the difference is what building and passing the Request
// costs the caller) or sethvargo; KEYS is 1 or 100000; PATH is allowed or
// refused. sluice runs without its sweeper, so that only decisions run
// while the count is taken.
//
//	instr pair KEYS N PATH ROUNDS
//	instr ppair KEYS N PATH ROUNDS
//
// times sluice (or the LIB in $INSTR_A) and sethvargo in alternating
// batches of N decisions in one process, ROUNDS times, by the CPU time of
// the thread (clock_gettime CLOCK_THREAD_CPUTIME_ID), so that time the
// thread spent waiting for a core on a loaded machine is not counted; it
// prints each round's ns per decision and their ratio, and the median
// ratio. ppair is pair with each batch made by GOMAXPROCS goroutines at
// once, timed by the wall clock (BenchmarkAllow's parallel cases): both
// libraries' batches alternate, so a change of the machine's speed falls
// on both.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	sethvargomem "github.com/sethvargo/go-limiter/memorystore"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

func main() {
	if len(os.Args) < 5 {
		fmt.Fprintln(os.Stderr, "usage: instr sluice|sluice-exact|sethvargo KEYS N allowed|refused, or instr pair KEYS N allowed|refused [ROUNDS]")
		os.Exit(2)
	}
	nk, err1 := strconv.Atoi(os.Args[2])
	n, err2 := strconv.Atoi(os.Args[3])
	if err1 != nil || err2 != nil || nk < 1 {
		fmt.Fprintln(os.Stderr, "instr: KEYS and N are numbers")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "pair":
		pair(nk, n, os.Args[4], false)
		return
	case "ppair":
		pair(nk, n, os.Args[4], true)
		return
	}
	keys := makeKeys(nk)
	allow, err := library(os.Args[1], os.Args[4] == "refused")
	if err != nil {
		fmt.Fprintln(os.Stderr, "instr:", err)
		os.Exit(2)
	}
	warm(allow, keys)
	fmt.Println(loop(allow, keys, n), "admitted")
}

// makeKeys returns the benchmark's keys, "user:100000" and on, or with
// the prefix in $INSTR_KEY_PREFIX instead of "user:" (to time keys of
// other lengths).
func makeKeys(nk int) []string {
	prefix := "user:"
	if p, ok := os.LookupEnv("INSTR_KEY_PREFIX"); ok {
		prefix = p
	}
	keys := make([]string, nk)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(100_000+i)
	}
	return keys
}

// warm uses every key once, each a copy, as BenchmarkAllow does.
func warm(allow func(string) bool, keys []string) {
	for _, k := range keys {
		allow(strings.Clone(k))
	}
}

// pair prints the CPU time per decision of sluice and sethvargo in
// alternating batches of n, and the median ratio; parallel, the wall time
// of batches made by GOMAXPROCS goroutines at once.
func pair(nk, n int, path string, parallel bool) {
	rounds := 20
	if len(os.Args) > 5 {
		rounds, _ = strconv.Atoi(os.Args[5])
	}
	if !parallel {
		runtime.LockOSThread()
	}
	keys := makeKeys(nk)
	var libs [2]func(string) bool
	first := "sluice"
	if v := os.Getenv("INSTR_A"); v != "" {
		first = v
	}
	for i, lib := range []string{first, "sethvargo"} {
		allow, err := library(lib, path == "refused")
		if err != nil {
			fmt.Fprintln(os.Stderr, "instr:", err)
			os.Exit(2)
		}
		warm(allow, keys)
		libs[i] = allow
	}
	runtime.GC()
	var ratios []float64
	for r := range rounds {
		var ns [2]float64
		for i, allow := range libs {
			if parallel {
				ns[i] = float64(parallelBatch(allow, keys, n)) / float64(n)
				continue
			}
			t := threadCPU()
			loop(allow, keys, n)
			ns[i] = float64(threadCPU()-t) / float64(n)
		}
		ratios = append(ratios, ns[0]/ns[1])
		fmt.Printf("round %d: sluice %.1f ns, sethvargo %.1f ns, ratio %.2f\n", r+1, ns[0], ns[1], ns[0]/ns[1])
	}
	slices.Sort(ratios)
	mode := "serial"
	if parallel {
		mode = "parallel"
	}
	fmt.Printf("keys=%d %s %s: median sluice/sethvargo %.2f over %d rounds of %d decisions\n", nk, path, mode, ratios[len(ratios)/2], rounds, n)
}

// parallelBatch makes n decisions from GOMAXPROCS goroutines, each drawing
// its own keys, and returns the wall time (ns) from the first start to the
// last finish.
func parallelBatch(allow func(string) bool, keys []string, n int) int64 {
	g := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range g {
		wg.Go(func() { loopFrom(allow, keys, n/g, 0x9e3779b97f4a7c15+uint64(i)*0x2545f4914f6cdd1d) })
	}
	wg.Wait()
	return time.Since(start).Nanoseconds()
}

// threadCPU returns the CPU time (ns) the calling thread has used, by
// clock_gettime(CLOCK_THREAD_CPUTIME_ID): exact to the nanosecond, where
// getrusage counts in scheduler ticks (4 ms here, a fifth of a round of
// 200,000 decisions at 100 ns).
func threadCPU() int64 {
	const clockThreadCPUTime = 3 // CLOCK_THREAD_CPUTIME_ID, Linux
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		panic(e)
	}
	return ts.Nano()
}

// library returns one decision of lib, under the benchmark's generous
// limit or its strict one.
func library(lib string, strict bool) (func(string) bool, error) {
	ctx := context.Background()
	switch lib {
	case "sluice", "sluice-exact", "sluice-take":
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
		if lib == "sluice-take" {
			req := sluice.Request{Limit: lim, Cost: 1}
			return func(k string) bool { req.Key = k; d, _ := st.Take(ctx, req); return d.Allowed }, nil
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
	return loopFrom(allow, keys, n, 0x9e3779b97f4a7c15)
}

// loopFrom is loop from the xorshift state x (not 0).
func loopFrom(allow func(string) bool, keys []string, n int, x uint64) int {
	admitted := 0
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
