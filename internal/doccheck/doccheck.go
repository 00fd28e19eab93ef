// Package doccheck compiles the Go code blocks of sluice's documentation,
// so that a guide's code cannot drift from the API it shows.
//
// A Markdown file's ```go blocks are read as programs: a block that starts
// with a package clause starts a program, and a block that does not
// continues the program before it (a guide may show one program in parts,
// with prose between). Build compiles each program as a package of a
// module, through the go command's -overlay, so that nothing is written
// into the module's tree.
package doccheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Program is one program of a Markdown file.
type Program struct {
	// Source is the program's Go source.
	Source string
	// Lines maps each line of Source (from 0) to its line in the Markdown
	// file (from 1).
	Lines []int
}

// Line returns the Markdown line of the program's first line.
func (p Program) Line() int { return p.Lines[0] }

// Imports reports whether the program imports path.
func (p Program) Imports(path string) bool {
	return strings.Contains(p.Source, strconv.Quote(path))
}

// Programs returns the programs of the ```go blocks of md. A block starts
// a program when its first line of code (after comments and blank lines)
// is a package clause; a block that continues no program is an error.
func Programs(md string) ([]Program, error) {
	var progs []Program
	var block Program
	inBlock := false
	for i, line := range strings.Split(md, "\n") {
		switch trimmed := strings.TrimSpace(line); {
		case !inBlock && trimmed == "```go":
			inBlock, block = true, Program{}
		case inBlock && trimmed == "```":
			inBlock = false
			switch {
			case len(block.Lines) == 0: // an empty block
			case startsProgram(block.Source):
				progs = append(progs, block)
			case len(progs) == 0:
				return nil, fmt.Errorf("line %d: a go block continues no program (it has no package clause, nor has one before it)", block.Lines[0])
			default:
				last := &progs[len(progs)-1]
				last.Source += block.Source
				last.Lines = append(last.Lines, block.Lines...)
			}
		case inBlock:
			block.Source += line + "\n"
			block.Lines = append(block.Lines, i+1)
		}
	}
	if inBlock {
		return nil, errors.New("a go block is not closed")
	}
	return progs, nil
}

// startsProgram reports whether the first line of code of src is a package
// clause.
func startsProgram(src string) bool {
	for line := range strings.SplitSeq(src, "\n") {
		switch line = strings.TrimSpace(line); {
		case line == "" || strings.HasPrefix(line, "//"):
			continue
		case strings.HasPrefix(line, "package "):
			return true
		}
		return false
	}
	return false
}

// Build compiles progs as packages of the module in dir (its go.mod's
// directory), each in a directory of its own, and fails t with the go
// command's report, its positions turned into lines of the Markdown file
// named doc. (go vet would want the directories to exist.)
func Build(t testing.TB, dir, doc string, progs []Program) {
	t.Helper()
	if len(progs) == 0 {
		t.Fatalf("%s: no programs to build", doc)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	for i, p := range progs {
		src := filepath.Join(tmp, fmt.Sprintf("p%d.go", i))
		if err := os.WriteFile(src, []byte(p.Source), 0o644); err != nil {
			t.Fatal(err)
		}
		pkg := fmt.Sprintf("doccheck_p%d", i)
		overlay[filepath.Join(dir, pkg, "main.go")] = src
		pkgs = append(pkgs, "./"+pkg)
	}
	b, _ := json.Marshal(map[string]any{"Replace": overlay})
	cfg := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(cfg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, pkg := range pkgs { // one at a time: with several, -o takes a directory and skips non-main packages
		cmd := exec.Command("go", "build", "-overlay", cfg, "-o", filepath.Join(tmp, fmt.Sprintf("p%d.out", i)), pkg)
		cmd.Dir = dir
		if report, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("the Go code of %s does not build: %v\n%s", doc, err, lines(string(report), tmp, doc, progs))
		}
	}
}

// lines turns the positions in the go command's report, in the programs'
// files in tmp, into lines of the Markdown file doc.
func lines(report, tmp, doc string, progs []Program) string {
	position := regexp.MustCompile(regexp.QuoteMeta(tmp) + `/p(\d+)\.go:(\d+)(:\d+)?`)
	return position.ReplaceAllStringFunc(report, func(m string) string {
		s := position.FindStringSubmatch(m)
		i, _ := strconv.Atoi(s[1])
		n, _ := strconv.Atoi(s[2])
		if i < len(progs) && n >= 1 && n <= len(progs[i].Lines) {
			return fmt.Sprintf("%s:%d", doc, progs[i].Lines[n-1])
		}
		return m
	})
}

// BuildFile builds (Build) the programs of the Markdown file at path that
// keep accepts, as packages of the module in dir.
func BuildFile(t testing.TB, dir, path string, keep func(Program) bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	progs, err := Programs(string(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var kept []Program
	for _, p := range progs {
		if keep(p) {
			kept = append(kept, p)
		}
	}
	Build(t, dir, filepath.Base(path), kept)
}
