package redisstore

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// TestPrune: prune keeps the functions the code outside functions reaches,
// directly or through other kept functions, by whole names outside
// comments, and drops the others with their lines.
func TestPrune(t *testing.T) {
	// Each line of the source; those prune must drop are marked "x ".
	lines := []string{
		"local x = 1",
		"local function used(a)", // reached from the entry point
		"  return helper(a) + x",
		"end",
		"local function helper(a)", // reached through used
		"  return a",
		"end",
		"x local function only_in_comment()", // named only after --
		"x   return 2",
		"x end",
		"x local function used_not()", // "used" is a prefix of its name, not a reference
		"x   return 3",
		"x end",
		"x local function recursive()", // names only itself
		"x   return recursive()",
		"x end",
		"local function twice()", // defined twice: both kept
		"  return 4",
		"end",
		"local function twice()",
		"  return 5",
		"end",
		"return used(1) + twice() -- only_in_comment()",
	}
	var src, want []string
	for _, l := range lines {
		if d, ok := strings.CutPrefix(l, "x "); ok {
			src = append(src, d)
			continue
		}
		src, want = append(src, l), append(want, l)
	}
	if got := prune(strings.Join(src, "\n")); got != strings.Join(want, "\n") {
		t.Errorf("prune:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// BenchmarkAssemble: what building one script costs. The first New builds
// every script (about 20): TestScriptsBuiltOnFirstUse times the whole.
func BenchmarkAssemble(b *testing.B) {
	l := scripts().lib
	b.ReportAllocs()
	for b.Loop() {
		l.assemble("take.lua", every...)
	}
}

// TestImportBuildsNoScript: the package's init builds no script, so a
// program that links redisstore without using Redis does not pay for
// them (built at init they cost ~7 ms and ~5 MB, and once ~90 ms and 20
// MB). It runs this test binary again, running no test, with the
// runtime's init trace on, and reads what redisstore's init allocated.
func TestImportBuildsNoScript(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", os.Args[0], err, out)
	}
	m := regexp.MustCompile(`init github.com/sluicehq/sluice/redisstore @\S+ ms, \S+ ms clock, (\d+) bytes`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no init line for redisstore in the init trace:\n%s", out)
	}
	bytes, _ := strconv.Atoi(string(m[1]))
	if bytes > 256<<10 {
		t.Errorf("redisstore's init allocated %d bytes; building the scripts belongs in New", bytes)
	}
	start := time.Now()
	set := scripts()
	if set.take == nil || set.take.batch == nil || set.refund == nil || set.release == nil ||
		set.lib.src == "" || len(set.takeOne) != len(every) {
		t.Fatalf("scripts() built an incomplete set: %+v", set)
	}
	t.Logf("redisstore's init allocated %d bytes; building every script took %v", bytes, time.Since(start))
}

// TestAlgorithmsLuaGenerated: scripts/algorithms.lua is what
// `go generate ./internal/algo` writes from the algorithm table, and the
// scripts compare algorithms by its names, never by a bare code.
func TestAlgorithmsLuaGenerated(t *testing.T) {
	got, err := sources.ReadFile("scripts/algorithms.lua")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != algo.Lua() {
		t.Fatal("scripts/algorithms.lua is stale: run go generate ./internal/algo")
	}
	// assembled, the names are codes (inline)
	for _, src := range []string{scripts().take.src, scripts().takeOne[sluice.AlgorithmGCRA].src, scripts().lib.src} {
		if strings.Contains(src, "local GCRA") || strings.Contains(src, "alg == GCRA") || !strings.Contains(src, "alg == 5") {
			t.Error("an assembled script reads the algorithm constants by name")
		}
	}
	numeric := regexp.MustCompile(`alg\s*[=~<>]=?\s*[0-9]`)
	files, _ := sources.ReadDir("scripts")
	for _, f := range files {
		src, _ := sources.ReadFile("scripts/" + f.Name())
		for i, l := range strings.Split(string(src), "\n") {
			if numeric.MatchString(l) {
				t.Errorf("scripts/%s:%d compares an algorithm with a bare code: %s", f.Name(), i+1, l)
			}
		}
	}
}
