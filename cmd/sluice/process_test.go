package main

import (
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proctest"
)

// binary is the sluice binary the process tests run, built once by
// TestMain.
var binary string

func TestMain(m *testing.M) { proctest.Main(m, ".", ".", &binary) }

// proc is a running `sluice serve`.
type proc struct {
	*proctest.Proc
	t     *testing.T
	addrs map[string]string // gateway, api, grpc, admin, envoy-http
}

// cleanEnv is the environment without SLUICE_* variables, so that the test
// harness's own (SLUICE_REDIS_ADDR, ...) never configure the server.
func cleanEnv(extra ...string) []string { return proctest.CleanEnv(extra...) }

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
	p := &proc{Proc: proctest.Start(t, binary, cleanEnv(env...), args...), t: t, addrs: map[string]string{}}
	for _, name := range []string{"gateway", "api", "grpc", "admin", "envoy-http"} {
		if a := p.Addr(name); a != "" {
			p.addrs[name] = a
		}
	}
	return p
}

func (p *proc) logs() string { return p.Logs() }

// url returns the URL of path on a listener.
func (p *proc) url(listener, path string) string {
	a := p.addrs[listener]
	if a == "" {
		p.t.Fatalf("listener %s is off", listener)
	}
	return "http://" + a + path
}

func (p *proc) signal(sig syscall.Signal) {
	if err := p.Cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.Done():
	case <-time.After(timeout):
		p.t.Fatalf("sluice did not exit within %v", timeout)
	}
	return p.Cmd.ProcessState.ExitCode()
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
