package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strings"

	"github.com/sluicehq/sluice"
)

// The Lua sources: one file per algorithm, a shared library and state
// handling, and one entry point per job. A script is assembled from the
// library, the algorithm files it needs, a dispatch table, state.lua and its
// entry point, so that one EVALSHA can decide requests under different
// algorithms atomically, while a single request runs a script holding only
// its own algorithm (less Lua to set up on every call).
//
//go:embed scripts/*.lua
var sources embed.FS

// algorithmFiles maps each algorithm to its file and Lua function.
var algorithmFiles = map[sluice.Algorithm][2]string{
	sluice.AlgorithmFixedWindow:   {"fixed_window.lua", "fixed_window"},
	sluice.AlgorithmSlidingLog:    {"sliding_log.lua", "sliding_log"},
	sluice.AlgorithmSlidingWindow: {"sliding_window.lua", "sliding_window"},
	sluice.AlgorithmTokenBucket:   {"bucket.lua", "token_bucket"},
	sluice.AlgorithmGCRA:          {"bucket.lua", "gcra"},
	sluice.AlgorithmLeakyBucket:   {"bucket.lua", "gcra"},
	sluice.AlgorithmWarmUp:        {"warm_up.lua", "warm_up"},
	sluice.AlgorithmConcurrency:   {"concurrency.lua", "concurrency"},
}

// script is one assembled Lua script and its SHA1, for EVALSHA.
type script struct {
	name string
	src  string
	sha  string
}

func read(f string) string {
	src, err := sources.ReadFile("scripts/" + f)
	if err != nil {
		panic("redisstore: missing embedded script " + f) // a build defect, caught by every test
	}
	return "-- " + f + "\n" + string(src) + "\n"
}

// assemble builds entry with the given algorithms.
func assemble(entry string, algs ...sluice.Algorithm) *script {
	var b strings.Builder
	b.WriteString(read("lib.lua"))
	seen := map[string]bool{}
	dispatch := "local algorithms = {"
	for _, a := range algs {
		f := algorithmFiles[a]
		if !seen[f[0]] {
			seen[f[0]] = true
			b.WriteString(read(f[0]))
		}
		dispatch += "[" + string(rune('0'+int(a))) + "] = " + f[1] + ", "
	}
	b.WriteString(dispatch + "}\n")
	b.WriteString(read("state.lua"))
	b.WriteString(read(entry))
	src := b.String()
	sum := sha1.Sum([]byte(src))
	return &script{name: entry, src: src, sha: hex.EncodeToString(sum[:])}
}

var every = []sluice.Algorithm{
	sluice.AlgorithmFixedWindow, sluice.AlgorithmSlidingLog, sluice.AlgorithmSlidingWindow,
	sluice.AlgorithmTokenBucket, sluice.AlgorithmGCRA, sluice.AlgorithmLeakyBucket,
	sluice.AlgorithmWarmUp, sluice.AlgorithmConcurrency,
}

var (
	takeScript    = assemble("take.lua", every...)
	refundScript  = assemble("refund.lua", every...)
	releaseScript = assemble("release.lua", sluice.AlgorithmConcurrency)
	// takeOne holds, per algorithm, the take script with only that
	// algorithm.
	takeOne = func() map[sluice.Algorithm]*script {
		m := map[sluice.Algorithm]*script{}
		for _, a := range every {
			m[a] = assemble("take.lua", a)
		}
		return m
	}()
)

// takeFor returns the smallest take script that covers every request.
func takeFor(rs []request) *script {
	for _, r := range rs[1:] {
		if r.p.Alg != rs[0].p.Alg {
			return takeScript
		}
	}
	return takeOne[rs[0].p.Alg]
}
