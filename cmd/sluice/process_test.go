package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// binary is the sluice binary the process tests run, built once by
// TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sluice")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building sluice:", err)
		os.Exit(1)
	}
	code := redistest.Run(m)
	os.RemoveAll(dir) // a binary of tens of MB, left in the temporary directory otherwise
	os.Exit(code)
}

// proc is a running `sluice serve`.
type proc struct {
	t     *testing.T
	cmd   *exec.Cmd
	addrs map[string]string // gateway, api, grpc, admin
	mu    sync.Mutex
	log   bytes.Buffer
	done  chan struct{}
	err   error // of Wait, once done is closed
}

// cleanEnv is the environment without SLUICE_* variables, so that the test
// harness's own (SLUICE_REDIS_ADDR, ...) never configure the server.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// serveArgs are the flags every test process gets: every listener on a
// free loopback port, JSON logs.
var serveArgs = []string{"serve", "--gateway", "127.0.0.1:0", "--api", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json"}

// start runs sluice with args (after "serve" and serveArgs) and env, and
// waits until it logs that it serves.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startArgs(t, env, append(append([]string(nil), serveArgs...), args...)...)
}

// startArgs runs sluice with exactly args.
func startArgs(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, addrs: map[string]string{}, done: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env = cleanEnv(env...)
	dieWithParent(p.cmd)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	serving := make(chan map[string]any, 1)
	go func() {
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
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("sluice log:\n%s", p.logs())
		}
	})
	select {
	case rec := <-serving:
		for _, name := range []string{"gateway", "api", "grpc", "admin", "envoy-http"} {
			if a, ok := rec[name].(string); ok {
				p.addrs[name] = a
			}
		}
	case <-p.done:
		t.Fatalf("sluice exited before serving (%v):\n%s", p.err, p.logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("sluice did not serve within 30s:\n%s", p.logs())
	}
	return p
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// url returns the URL of path on a listener.
func (p *proc) url(listener, path string) string {
	a := p.addrs[listener]
	if a == "" {
		p.t.Fatalf("listener %s is off", listener)
	}
	return "http://" + a + path
}

func (p *proc) signal(sig syscall.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("sluice did not exit within %v", timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// waitLog waits until the log contains s.
func (p *proc) waitLog(s string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if strings.Contains(p.logs(), s) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.t.Fatalf("the log never said %q", s)
}

// client never reuses connections across tests and never follows
// redirects, so status codes are what the server sent.
var client = &http.Client{
	Timeout:       20 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

type response struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, method, url string, body string, headers ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, string(b)}
}

func get(t *testing.T, url string, headers ...string) response {
	t.Helper()
	return do(t, "GET", url, "", headers...)
}

// metric returns the value of the first sample of /metrics whose line
// starts with prefix (name and labels as Prometheus prints them), or 0.
func metric(t *testing.T, p *proc, prefix string) float64 {
	t.Helper()
	return sampleValue(get(t, p.url("admin", "/metrics")).body, prefix)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
