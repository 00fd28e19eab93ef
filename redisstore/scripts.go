package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/sluicehq/sluice"
)

// The Lua sources: one file per algorithm, a shared library and state
// handling, and one entry point per job. A script is assembled from the
// library, the algorithm files it needs, a dispatch table, state.lua and its
// entry point, so that one EVALSHA can decide requests under different
// algorithms atomically, while a single request runs a script holding only
// its own algorithm (less Lua to set up on every call). The function
// library (see library) holds every algorithm and entry point at once.
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

// script is one assembled Lua script and its SHA1, for EVALSHA, and the
// name of the function of the library that does the same job, for FCALL.
type script struct {
	name string
	src  string
	sha  string
	fn   string
	// batch, for a take script, is batch.lua with the same algorithms: it
	// decides several calls of this script in one.
	batch *script
}

func read(f string) string {
	src, err := sources.ReadFile("scripts/" + f)
	if err != nil {
		panic("redisstore: missing embedded script " + f) // a build defect, caught by every test
	}
	return "-- " + f + "\n" + string(src) + "\n"
}

// common writes what every entry point needs: the library, the given
// algorithms and their dispatch table, and state.lua.
func common(b *strings.Builder, algs ...sluice.Algorithm) {
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
}

// assemble builds entry with the given algorithms.
func assemble(entry string, algs ...sluice.Algorithm) *script {
	var b strings.Builder
	common(&b, algs...)
	b.WriteString("keys, argv = KEYS, ARGV\n")
	b.WriteString(read(entry))
	src := prune(b.String())
	sum := sha1.Sum([]byte(src))
	return &script{name: entry, src: src, sha: hex.EncodeToString(sum[:]), fn: lib.fn[entry]}
}

var every = []sluice.Algorithm{
	sluice.AlgorithmFixedWindow, sluice.AlgorithmSlidingLog, sluice.AlgorithmSlidingWindow,
	sluice.AlgorithmTokenBucket, sluice.AlgorithmGCRA, sluice.AlgorithmLeakyBucket,
	sluice.AlgorithmWarmUp, sluice.AlgorithmConcurrency,
}

// library is every entry point as a function of one Redis function
// library (Redis 7 and later): loaded once, it spares the server what a
// script costs on every call, running its whole text again (a closure for
// each of its functions), which is most of the cost of a lone decision;
// and a function keeps its parsed limits from call to call. The library is
// named after a digest of its text, and so are its functions, so that
// instances running different versions of sluice share a server safely.
//
// Redis runs a library's text when it loads it, without the standard
// libraries (math, string); so the text only registers the functions, and
// the first call builds the rest (what a script builds on every call),
// once.
type library struct {
	name string
	src  string
	fn   map[string]string // entry file -> function name
}

var lib = func() library {
	entries := []string{"take.lua", "batch.lua", "refund.lua", "release.lua"}
	var body strings.Builder
	common(&body, every...)
	body.WriteString("return {\n")
	for _, e := range entries {
		fmt.Fprintf(&body, "[%q] = function(k, a)\nkeys, argv, server_time = k, a, nil\n%send,\n", e, read(e))
	}
	body.WriteString("}\n")
	text := prune(body.String())
	sum := sha1.Sum([]byte(text))
	l := library{name: "sluice_" + hex.EncodeToString(sum[:6]), fn: map[string]string{}}
	var b strings.Builder
	fmt.Fprintf(&b, "#!lua name=%s\n-- sluice's scripts as a function library: see redisstore/scripts.go.\n", l.name)
	b.WriteString("local entries = nil\nlocal function build()\n")
	b.WriteString(text)
	b.WriteString("\nend\n")
	b.WriteString("local function entry(e)\n  return function(k, a)\n    if not entries then\n      entries = build()\n    end\n    return entries[e](k, a)\n  end\nend\n")
	for _, e := range entries {
		l.fn[e] = l.name + "_" + strings.TrimSuffix(e, ".lua")
		fmt.Fprintf(&b, "redis.register_function('%s', entry(%q))\n", l.fn[e], e)
	}
	l.src = b.String()
	return l
}()

var (
	takeScript    = withBatch(assemble("take.lua", every...), every...)
	refundScript  = assemble("refund.lua", every...)
	releaseScript = assemble("release.lua", sluice.AlgorithmConcurrency)
	// takeOne holds, per algorithm, the take script with only that
	// algorithm.
	takeOne = func() map[sluice.Algorithm]*script {
		m := map[sluice.Algorithm]*script{}
		for _, a := range every {
			m[a] = withBatch(assemble("take.lua", a), a)
		}
		return m
	}()
)

// withBatch sets take's batch script, holding the same algorithms.
func withBatch(take *script, algs ...sluice.Algorithm) *script {
	take.batch = assemble("batch.lua", algs...)
	return take
}

// takeFor returns the smallest take script that covers every request.
func takeFor(rs []request) *script {
	for _, r := range rs[1:] {
		if r.p.Alg != rs[0].p.Alg {
			return takeScript
		}
	}
	return takeOne[rs[0].p.Alg]
}

// prune drops the top-level functions a script never calls. Redis runs the
// whole script body on every call, and each "local function" is a closure
// created anew each time, so a function the entry point cannot reach costs
// time on every decision for nothing. A function is a line
// "local function name(" up to the next line that is exactly "end"; it is
// kept if its name appears, outside comments, in the code kept so far (the
// entry point, the dispatch table and other kept functions).
func prune(src string) string {
	lines := strings.Split(src, "\n")
	type fn struct {
		name       string
		start, end int // lines [start, end]
	}
	var fns []fn
	for i := 0; i < len(lines); i++ {
		m := functionStart.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		j := i + 1
		for j < len(lines) && lines[j] != "end" {
			j++
		}
		fns = append(fns, fn{m[1], i, j})
		i = j
	}
	inFn := make([]int, len(lines)) // 1 + index in fns, or 0
	for k, f := range fns {
		for i := f.start; i <= f.end; i++ {
			inFn[i] = k + 1
		}
	}
	code := func(i int) string { // line i without its comment
		l := lines[i]
		if c := strings.Index(l, "--"); c >= 0 {
			l = l[:c]
		}
		return l
	}
	var roots strings.Builder
	for i := range lines {
		if inFn[i] == 0 {
			roots.WriteString(code(i) + "\n")
		}
	}
	kept := make([]bool, len(fns))
	frontier := []string{roots.String()}
	for len(frontier) > 0 {
		text := frontier[len(frontier)-1]
		frontier = frontier[:len(frontier)-1]
		for k, f := range fns {
			if kept[k] || !regexp.MustCompile(`\b`+f.name+`\b`).MatchString(text) {
				continue
			}
			kept[k] = true
			var body strings.Builder
			for i := f.start + 1; i <= f.end; i++ { // not its own name
				body.WriteString(code(i) + "\n")
			}
			frontier = append(frontier, body.String())
		}
	}
	var out strings.Builder
	for i, l := range lines {
		if k := inFn[i]; k > 0 && !kept[k-1] {
			continue
		}
		out.WriteString(l)
		if i < len(lines)-1 {
			out.WriteString("\n")
		}
	}
	return out.String()
}

var functionStart = regexp.MustCompile(`^local function ([A-Za-z_][A-Za-z0-9_]*)\(`)
