package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/server"
)

// TestReadmeRunIt keeps README's "Run it" true: the addresses it curls are
// sluice serve's defaults, and its decision API example is answered.
func TestReadmeRunIt(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	_, runIt, ok := strings.Cut(readme, "## Run it")
	if !ok {
		t.Fatal(`README.md has no "## Run it" section`)
	}
	runIt, _, _ = strings.Cut(runIt, "\n## ")
	if !strings.Contains(runIt, "go run ./cmd/sluice serve") {
		t.Errorf("Run it does not start sluice serve")
	}
	for name, addr := range map[string]string{"gateway": server.DefaultGateway, "api": server.DefaultAPI, "admin": server.DefaultAdmin} {
		if !strings.Contains(runIt, "http://"+addr+"/") {
			t.Errorf("Run it does not use the default %s address %s", name, addr)
		}
	}
	_, body, ok := strings.Cut(runIt, "/v1/check -d '")
	if !ok {
		t.Fatal("Run it has no decision API example")
	}
	body, _, _ = strings.Cut(body, "'")
	p := start(t, nil)
	r := do(t, "POST", p.url("api", "/v1/check"), body)
	var a struct{ Allowed bool }
	if err := json.Unmarshal([]byte(r.body), &a); r.status != 200 || err != nil || !a.Allowed {
		t.Errorf("README's decision API example: %d %s", r.status, r.body)
	}
}

// TestReadmeInstall keeps README's installation from a clone true: its
// go build command builds sluice from the repository root, and the
// unpublished module path is not offered as a go get.
func TestReadmeInstall(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, install, ok := strings.Cut(string(b), "## Install")
	if !ok {
		t.Fatal(`README.md has no "## Install" section`)
	}
	install, _, _ = strings.Cut(install, "\n## ")
	for _, want := range []string{"go install ./cmd/sluice", "go build -o sluice ./cmd/sluice", "-replace=github.com/sluicehq/sluice="} {
		if !strings.Contains(install, want) {
			t.Errorf("Install does not say %q", want)
		}
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(t.TempDir(), "sluice"), "./cmd/sluice")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("README's go build: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "go get ") || strings.Contains(line, "sluice/cmd/sluice@latest") {
			t.Errorf("README offers the unpublished module path: %s", line)
		}
	}
}

// TestReadmeReplay runs README's sluice replay, suggest and check
// commands on the sample day (its log paths and policy.yaml stand for
// the test's files; a redirection writes into the test's directory).
func TestReadmeReplay(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## Choosing limits from real traffic")
	if !ok {
		t.Fatal(`README.md has no "## Choosing limits from real traffic" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	writeFile(t, pol, samplePolicy)
	files := map[string]string{"/var/log/nginx/access.log": sampleLog(t, "combined"), "requests.jsonl": sampleLog(t, "json"), "policy.yaml": pol}
	n := 0
	for _, line := range strings.Split(section, "\n") {
		rest, ok := strings.CutPrefix(line, "sluice ")
		if !ok {
			continue
		}
		n++
		rest, redirect, _ := strings.Cut(rest, ">")
		args := shellWords(rest)
		for i, a := range args {
			if f, ok := files[a]; ok {
				args[i] = f
			}
		}
		stdout, stderr, code := runSluice(t, args...)
		if code != 0 {
			t.Errorf("README: %s: exit %d\n%s%s", line, code, stdout, stderr)
		}
		if redirect = strings.TrimSpace(redirect); redirect != "" {
			files[redirect] = filepath.Join(dir, redirect)
			writeFile(t, files[redirect], stdout)
		}
	}
	if n < 3 {
		t.Errorf("README shows %d sluice commands in its replay section, want replay, suggest and check", n)
	}
}

// TestReadmeLayout keeps README's layout whole: it names every package of
// the module (its directory), every command of sluice and every page of
// docs/.
func TestReadmeLayout(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(b), "## Layout")
	if !ok {
		t.Fatal(`README.md has no "## Layout" section`)
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "github.com/sluicehq/sluice/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("../..")
	listed := map[string]bool{}
	for _, line := range strings.Split(layout, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			listed[strings.TrimSuffix(f[0], "/")] = true
		}
	}
	for _, dir := range strings.Fields(string(out)) {
		rel, _ := filepath.Rel(root, dir)
		if top, _, _ := strings.Cut(rel, "/"); rel == "." || listed[top] && (top == "examples" || top == "deploy") {
			continue // the root package, and directories listed whole
		}
		if !listed[filepath.ToSlash(rel)] {
			t.Errorf("README's layout does not list the package %s", rel)
		}
	}
	cmdLine := ""
	for _, line := range strings.Split(layout, "\n") {
		if strings.HasPrefix(line, "cmd/sluice ") {
			cmdLine = line
		}
	}
	for _, c := range commandNames() {
		if c != "help" && !strings.Contains(cmdLine, " "+c) {
			t.Errorf("README's layout does not name the command %s: %q", c, cmdLine)
		}
	}
	pages, _ := filepath.Glob("../../docs/*.md")
	for _, p := range pages {
		if !strings.Contains(layout, filepath.Base(p)) {
			t.Errorf("README's layout does not name docs/%s", filepath.Base(p))
		}
	}
}

// TestNoMacOnlyOpen: README's commands and sluice's help tell a reader to
// open the status page in a browser, not with macOS's open command.
func TestNoMacOnlyOpen(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	help, _, _ := runSluice(t, "help")
	for name, text := range map[string]string{"README.md": string(b), "sluice help": help} {
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "open ") {
				t.Errorf("%s: %q: open is macOS's; say to open the address in a browser", name, line)
			}
		}
	}
}
