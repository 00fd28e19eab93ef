package doccheck_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/doccheck"
)

// chi is the one module docs/go.md imports that the sluice module does
// not require: its programs are built in examples/frameworks.
const chi = "github.com/go-chi/chi/v5"

// TestGoGuide builds every program of docs/go.md that the sluice module can
// build (the others: examples/frameworks/docs_test.go).
func TestGoGuide(t *testing.T) {
	doccheck.BuildFile(t, "../..", "../../docs/go.md", func(p doccheck.Program) bool { return !p.Imports(chi) })
}

func TestPrograms(t *testing.T) {
	md := strings.Join([]string{
		"text", // 1
		"```go",
		"// Command a.",
		"package main", // 4
		"```",
		"prose",
		"```go",
		"func f() {}", // 8: continues the program of line 4
		"```",
		"```sh",
		"go run .",
		"```",
		"```go",
		"package keys", // 14
		"```",
	}, "\n")
	progs, err := doccheck.Programs(md)
	if err != nil {
		t.Fatal(err)
	}
	if len(progs) != 2 || progs[0].Source != "// Command a.\npackage main\nfunc f() {}\n" ||
		progs[0].Lines[2] != 8 || progs[1].Line() != 14 {
		t.Fatalf("%+v", progs)
	}
	if _, err := doccheck.Programs("```go\nfunc f() {}\n```\n"); err == nil {
		t.Error("a block that continues no program was accepted")
	}
	if _, err := doccheck.Programs("```go\npackage main\n"); err == nil {
		t.Error("an open block was accepted")
	}
}
