package redisstore

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPrune: prune keeps the functions the code outside functions reaches,
// directly or through other kept functions, by whole names outside
// comments, and drops the others with their lines.
func TestPrune(t *testing.T) {
	src := strings.Join([]string{
		"local x = 1",
		"local function used(a)", // reached from the entry point
		"  return helper(a) + x",
		"end",
		"local function helper(a)", // reached through used
		"  return a",
		"end",
		"local function only_in_comment()", // named only after --
		"  return 2",
		"end",
		"local function used_not()", // "used" is a prefix of its name, not a reference
		"  return 3",
		"end",
		"local function recursive()", // names only itself
		"  return recursive()",
		"end",
		"local function twice()", // defined twice: both kept
		"  return 4",
		"end",
		"local function twice()",
		"  return 5",
		"end",
		"return used(1) + twice() -- only_in_comment()",
	}, "\n")
	want := strings.Join([]string{
		"local x = 1",
		"local function used(a)",
		"  return helper(a) + x",
		"end",
		"local function helper(a)",
		"  return a",
		"end",
		"local function twice()",
		"  return 4",
		"end",
		"local function twice()",
		"  return 5",
		"end",
		"return used(1) + twice() -- only_in_comment()",
	}, "\n")
	if got := prune(src); got != want {
		t.Errorf("prune:\n%s\nwant:\n%s", got, want)
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
