package memstore

import (
	"os/exec"
	"regexp"
	"testing"
)

// TestHotPathInlines holds the compiler's inlining of the functions on the
// path of nearly every decision (Limiter.Allow into the caller, the clock,
// the hash of a key of 8 to 16 bytes, the shard pick, the key and limit
// compares, the token bucket's refill).
// Each is small enough today; an edit that pushes one over the inliner's
// budget adds a call, its spills and, for Allow, a second copy of the
// Request: 50 to 80 instructions on a decision of about 500 (bench/RESULTS.md,
// sixth run), which no other test would notice.
func TestHotPathInlines(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the compiler")
	}
	out, err := exec.Command("go", "build", "-gcflags=-m", "..", ".", "../internal/algo").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	for _, fn := range []string{
		`\(\*Limiter\)\.Allow`, `\(\*Limiter\)\.AllowN`,
		`\(\*Store\)\.now`, `\(\*Store\)\.shardOf`, `\(\*Store\)\.hashShort`,
		`packShort`, `sameLimit`, `sameZone`, `tokenUsed`,
	} {
		if !regexp.MustCompile(`(?m): can inline ` + fn + `$`).Match(out) {
			t.Errorf("%s no longer inlines (go build -gcflags=-m says why with -m=2): "+
				"the decision path gains a call; shrink it back or measure the cost with bench/instr.sh", fn)
		}
	}
}
