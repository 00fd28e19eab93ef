// Package proctest runs the sluice command in tests: it builds the binary
// once per test binary (Main), starts processes and waits until they serve
// (Start), and keeps their logs to show when a test fails.
package proctest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Main builds the sluice command, the package pkg of directory dir ("."
// or "./cmd/sluice"), into a temporary directory, with the race detector
// when the test binary has it, and stores its path in *binary; then it
// runs the tests (redistest.Run), removes the binary and exits.
func Main(m *testing.M, dir, pkg string, binary *string) {
	tmp, err := os.MkdirTemp("", "sluice-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*binary = filepath.Join(tmp, "sluice")
	args := []string{"build", "-o", *binary}
	if raceEnabled() { // shares the race build of other packages in the cache
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building sluice:", err)
		os.RemoveAll(tmp)
		os.Exit(1)
	}
	code := redistest.Run(m)
	os.RemoveAll(tmp) // a binary of tens of MB; a defer would not run past os.Exit
	os.Exit(code)
}

func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// CleanEnv is the environment without SLUICE_* variables, so that the
// test harness's own (SLUICE_REDIS_ADDR, ...) never configure a process,
// and with extra.
func CleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Proc is a running sluice.
type Proc struct {
	Cmd *exec.Cmd
	// Serving is the log record "sluice serving": the address of each
	// listener, by name.
	Serving map[string]any

	mu   sync.Mutex
	log  bytes.Buffer
	done chan struct{}
	err  error // of Wait, once done is closed
}

// Start runs binary with args in exactly env (see CleanEnv), with JSON
// logs on stderr, and waits until it logs "sluice serving". It fails t if
// the process exits first or does not serve within 30s. At the end of the
// test the process is killed (on Linux, also when the test binary dies)
// and, if the test failed, its log shown.
func Start(t testing.TB, binary string, env []string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Cmd: exec.Command(binary, args...), done: make(chan struct{})}
	p.Cmd.Env = env
	dieWithParent(p.Cmd)
	stderr, err := p.Cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	serving := make(chan map[string]any, 1)
	go p.read(stderr, serving)
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.Cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("sluice log:\n%s", p.Logs())
		}
	})
	select {
	case p.Serving = <-serving:
	case <-p.done:
		t.Fatalf("sluice exited before serving (%v):\n%s", p.err, p.Logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("sluice did not serve within 30s:\n%s", p.Logs())
	}
	return p
}

// read keeps the log and sends the "sluice serving" record, until the
// process exits.
func (p *Proc) read(stderr interface{ Read([]byte) (int, error) }, serving chan<- map[string]any) {
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		p.mu.Lock()
		p.log.Write(line)
		p.log.WriteByte('\n')
		p.mu.Unlock()
		var rec map[string]any
		if json.Unmarshal(line, &rec) == nil && rec["msg"] == "sluice serving" {
			serving <- rec
		}
	}
	p.err = p.Cmd.Wait()
	close(p.done)
}

// Logs returns what the process has logged so far.
func (p *Proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// Done is closed when the process has exited; Err is then Wait's error.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the error of the process's Wait, once Done is closed.
func (p *Proc) Err() error { return p.err }

// Addr is the address the listener name serves on, "" when it is off.
func (p *Proc) Addr(name string) string {
	a, _ := p.Serving[name].(string)
	return a
}
