package rls_test

import (
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/server/rls"
)

// TestDocExampleLoads keeps the configuration shown in the package
// documentation one that loads.
func TestDocExampleLoads(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	// The example is the indented block that starts with "domain: edge"
	// and runs, blank comment lines included, until the next prose line.
	var yaml []string
	in := false
	for _, line := range strings.Split(string(src), "\n") {
		if line == "//\tdomain: edge" {
			in = true
		}
		if in && line != "//" && !strings.HasPrefix(line, "//\t") {
			break
		}
		if in {
			yaml = append(yaml, strings.TrimPrefix(strings.TrimPrefix(line, "//"), "\t"))
		}
	}
	if len(yaml) < 50 {
		t.Fatalf("found only %d lines of the example", len(yaml))
	}
	cfg, err := rls.ParseConfig("doc.go", []byte(strings.Join(yaml, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.String(); got != "edge (doc.go, 9 limits)" {
		t.Fatal(got)
	}
}
