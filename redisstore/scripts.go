package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// The Lua sources: one file per algorithm, a shared library and state
// handling, the algorithm constants (algorithms.lua, generated from
// internal/algo's table), and one entry point per job. A script is assembled from the
// library, the algorithm files it needs, a dispatch table, the shared code
// (stateFiles) and its
// entry point, so that one EVALSHA can decide requests under different
// algorithms atomically, while a single request runs a script holding only
// its own algorithm (less Lua to set up on every call). The function
// library (see library) holds every algorithm and entry point at once.
//
//go:embed scripts/*.lua
var sources embed.FS

// script is one assembled Lua script and its SHA1, for EVALSHA, and the
// name of the function of the library that does the same job, for FCALL.
type script struct {
	name  string
	src   string
	sha   string
	fn    string
	fnArg any // fn, boxed once for the commands sluice builds (fcall)
	// batch, for a take script, is batch.lua with the same algorithms: it
	// decides several calls of this script in one.
	batch *script
	// one, for a take script of one algorithm, is one.lua: the same job for
	// a call of one request on the server's clock, sent without the clock
	// argument (see alone).
	one *script
}

func read(f string) string {
	src, err := sources.ReadFile("scripts/" + f)
	if err != nil {
		panic("redisstore: missing embedded script " + f) // a build defect, caught by every test
	}
	return "-- " + f + "\n" + string(src) + "\n"
}

// stateFiles are the shared code of the entry points, by role, in the order
// they are assembled: the arguments and reading them, state I/O, one
// request decided (take, peek, undo), the reply's encoding, checks of
// several requests.
var stateFiles = []string{"args.lua", "stateio.lua", "decide.lua", "reply.lua", "check.lua"}

// common writes what every entry point needs: the library, the given
// algorithms and their dispatch table, adopt.lua and stateFiles.
func common(b *strings.Builder, algs ...sluice.Algorithm) {
	b.WriteString(read("lib.lua"))
	b.WriteString(read("algorithms.lua"))
	seen := map[string]bool{}
	dispatch := "local algorithms = {"
	for _, a := range algs {
		d := algo.Of(a)
		if !seen[d.LuaFile] {
			seen[d.LuaFile] = true
			b.WriteString(read(d.LuaFile))
		}
		dispatch += "[" + algo.LuaName(a) + "] = " + d.LuaStep + ", "
	}
	b.WriteString(dispatch + "}\n")
	b.WriteString(read("adopt.lua"))
	for _, f := range stateFiles {
		b.WriteString(read(f))
	}
}

// assemble builds entry with the given algorithms; l names its function.
func (l library) assemble(entry string, algs ...sluice.Algorithm) *script {
	var b strings.Builder
	common(&b, algs...)
	b.WriteString("keys, argv = KEYS, ARGV\n")
	b.WriteString(read(entry))
	src := prune(inline(b.String()))
	sum := sha1.Sum([]byte(src))
	return &script{name: entry, src: src, sha: hex.EncodeToString(sum[:]), fn: l.fn[entry], fnArg: l.fn[entry]}
}

var every = sluice.Algorithms()

// where returns the algorithms whose description has the property f.
func where(f func(*algo.Desc) bool) []sluice.Algorithm {
	var out []sluice.Algorithm
	for _, a := range every {
		if f(algo.Of(a)) {
			out = append(out, a)
		}
	}
	return out
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

func newLibrary() library {
	entries := []string{"take.lua", "one.lua", "batch.lua", "refund.lua", "release.lua", "adjust.lua", "lease.lua"}
	var body strings.Builder
	common(&body, every...)
	body.WriteString("return {\n")
	for _, e := range entries {
		fmt.Fprintf(&body, "[%q] = function(k, a)\nkeys, argv, server_time, held = k, a, nil, nil\n%send,\n", e, read(e))
	}
	body.WriteString("}\n")
	text := prune(inline(body.String()))
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
}

// scriptSet is the function library and every script. It is built on
// first use (New) rather than at package init, so that a program importing
// the package without using it does not pay for it (about 7 ms and 5 MB).
type scriptSet struct {
	lib     library
	take    *script // take with every algorithm
	refund  *script
	release *script
	adjust  *script
	lease   *script // quota leases (lease.go)
	// takeOne holds, per algorithm, the take script with only that
	// algorithm.
	takeOne map[sluice.Algorithm]*script
}

var scripts = sync.OnceValue(func() *scriptSet {
	l := newLibrary()
	withBatch := func(take *script, algs ...sluice.Algorithm) *script {
		take.batch = l.assemble("batch.lua", algs...) // decides several calls of take in one
		return take
	}
	s := &scriptSet{
		lib:     l,
		take:    withBatch(l.assemble("take.lua", every...), every...),
		refund:  l.assemble("refund.lua", every...),
		release: l.assemble("release.lua", where(func(d *algo.Desc) bool { return d.Leases })...),
		adjust:  l.assemble("adjust.lua", every...),
		lease:   l.assemble("lease.lua", where(func(d *algo.Desc) bool { return d.QuotaLeases })...),
		takeOne: map[sluice.Algorithm]*script{},
	}
	for _, a := range every {
		s.takeOne[a] = withBatch(l.assemble("take.lua", a), a)
		s.takeOne[a].one = l.assemble("one.lua", a)
	}
	return s
})

// takeFor returns the smallest take script that covers every request.
func takeFor(rs []request) *script {
	for _, r := range rs[1:] {
		if r.p.Alg != rs[0].p.Alg {
			return scripts().take
		}
	}
	return scripts().takeOne[rs[0].p.Alg]
}

// constantRe matches the algorithm constants of algorithms.lua: their
// declarations, and their names as words elsewhere.
var constantRe = sync.OnceValue(func() *regexp.Regexp {
	names := make([]string, 0, len(every))
	for _, a := range every {
		names = append(names, algo.LuaName(a))
	}
	alt := strings.Join(names, "|")
	return regexp.MustCompile(`(?m)^local (?:` + alt + `) = \d+\n|\b(?:` + alt + `)\b`)
})

// inline writes each algorithm constant's code in place of its name and
// drops the declarations: the Lua reads names (algorithms.lua), the server
// runs literals. Every top-level local a function reads is an upvalue its
// closure captures, and a script creates its closures on every call: as
// locals, the constants cost an EVALSHA of a lone GCRA decision about a
// fifth more server time (bench/REDIS.md).
func inline(src string) string {
	return constantRe().ReplaceAllStringFunc(src, func(m string) string {
		if strings.HasPrefix(m, "local ") {
			return ""
		}
		a, _ := sluice.ParseAlgorithm(strings.ToLower(m))
		return strconv.Itoa(int(a))
	})
}

// prune drops the top-level functions a script never calls. Redis runs the
// whole script body on every call, and each "local function" is a closure
// created anew each time, so a function the entry point cannot reach costs
// time on every decision for nothing. A function is a line
// "local function name(" up to the next line that is exactly "end"; it is
// kept if its name is a word, outside comments, of the code kept so far
// (the entry point, the dispatch table and other kept functions).
//
// It runs for every script at package init, so it reads each line once and
// looks names up in a map: a regexp per function and text made importing
// the package cost ~90 ms and 20 MB.
func prune(src string) string {
	lines := strings.Split(src, "\n")
	fns, inFn := luaFuncs(lines)
	keepCalled(lines, fns, inFn)
	var out strings.Builder
	out.Grow(len(src))
	for i, l := range lines {
		if f := inFn[i]; f != nil && !f.kept {
			continue
		}
		out.WriteString(l)
		if i < len(lines)-1 {
			out.WriteString("\n")
		}
	}
	return out.String()
}

// luaFunc is a top-level function of a script, lines [start, end].
type luaFunc struct {
	start, end int
	kept       bool
}

// luaFuncs finds the top-level functions of lines: fns by name (a name
// defined twice: both), inFn the function each line belongs to (nil
// outside functions).
func luaFuncs(lines []string) (fns map[string][]*luaFunc, inFn []*luaFunc) {
	fns = map[string][]*luaFunc{}
	inFn = make([]*luaFunc, len(lines))
	for i := 0; i < len(lines); i++ {
		m := functionStart.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		j := i + 1
		for j < len(lines) && lines[j] != "end" {
			j++
		}
		f := &luaFunc{start: i, end: j}
		fns[m[1]] = append(fns[m[1]], f)
		for k := i; k <= j && k < len(lines); k++ {
			inFn[k] = f
		}
		i = j
	}
	return fns, inFn
}

// keepCalled marks kept, from the code outside functions on, every
// function named in kept code; a function's own first line (its name)
// does not count.
func keepCalled(lines []string, fns map[string][]*luaFunc, inFn []*luaFunc) {
	var todo []*luaFunc
	use := func(i int) {
		l := lines[i]
		if c := strings.Index(l, "--"); c >= 0 {
			l = l[:c]
		}
		for l != "" { // each word of l
			w := strings.IndexFunc(l, isWord)
			if w < 0 {
				break
			}
			l = l[w:]
			e := strings.IndexFunc(l, notWord)
			if e < 0 {
				e = len(l)
			}
			for _, f := range fns[l[:e]] {
				if !f.kept {
					f.kept = true
					todo = append(todo, f)
				}
			}
			l = l[e:]
		}
	}
	for i := range lines {
		if inFn[i] == nil {
			use(i)
		}
	}
	for len(todo) > 0 {
		f := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		for i := f.start + 1; i <= f.end && i < len(lines); i++ {
			use(i)
		}
	}
}

// isWord reports whether r is part of a Lua name (ASCII letters, digits,
// underscore), as regexp's \b would see it.
func isWord(r rune) bool {
	return r == '_' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
}

func notWord(r rune) bool { return !isWord(r) }

var functionStart = regexp.MustCompile(`^local function ([A-Za-z_][A-Za-z0-9_]*)\(`)
