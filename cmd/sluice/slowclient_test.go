package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowClients is how many connections each slow-client test holds.
const slowClients = 1000

// dialAll opens n connections to addr.
func dialAll(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	return conns
}

// closedWithin waits until the server has closed every one of conns (a
// read ends with EOF or a reset, after whatever the server wrote) and
// returns the longest time from start that took; it fails the test if a
// connection is still open after limit.
func closedWithin(t *testing.T, conns []net.Conn, start time.Time, limit time.Duration) time.Duration {
	t.Helper()
	var (
		mu      sync.Mutex
		longest time.Duration
		open    int
		wg      sync.WaitGroup
	)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(start.Add(limit))
			_, err := io.Copy(io.Discard, c) // nil at EOF
			took := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				open++
				return
			}
			longest = max(longest, took)
		}()
	}
	wg.Wait()
	if open > 0 {
		t.Errorf("%d of %d connections still open after %v", open, len(conns), limit)
	}
	return longest
}

// TestSlowClientsCut holds 1,000 connections that trickle a request body
// to the decision API, 1,000 that send nothing to the gateway and 200 that
// send nothing to the gRPC listener (grpc's own default waits 120 s): each
// is cut within its timeout (plus what a loaded machine needs to get round
// to it), and a keep-alive connection is closed after the idle timeout.
func TestSlowClientsCut(t *testing.T) {
	const readTimeout, headerTimeout, idleTimeout = 2 * time.Second, time.Second, time.Second
	const slack = 4 * time.Second // scheduling on a busy 2-core machine; the old code kept them 40 s and more
	p := start(t, nil, "--read-timeout", readTimeout.String(), "--read-header-timeout", headerTimeout.String(),
		"--idle-timeout", idleTimeout.String())

	t.Run("trickling bodies", func(t *testing.T) {
		conns := dialAll(t, p.addrs["api"], slowClients)
		start := time.Now()
		for _, c := range conns {
			fmt.Fprintf(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
		}
		stop := make(chan struct{})
		defer close(stop)
		go func() { // a byte per connection every 200 ms: never idle, never done
			for {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
				for _, c := range conns {
					c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
					c.Write([]byte(" "))
				}
			}
		}()
		took := closedWithin(t, conns, start, readTimeout+slack)
		t.Logf("%d trickling bodies cut, the last %v after the first byte (read timeout %v)", len(conns), took.Round(time.Millisecond), readTimeout)
	})

	t.Run("idle connections", func(t *testing.T) {
		start := time.Now()
		conns := dialAll(t, p.addrs["gateway"], slowClients)
		took := closedWithin(t, conns, start, headerTimeout+slack)
		t.Logf("%d silent connections cut, the last %v after the first dial (read-header timeout %v)", len(conns), took.Round(time.Millisecond), headerTimeout)
	})

	t.Run("silent gRPC connections", func(t *testing.T) {
		start := time.Now()
		conns := dialAll(t, p.addrs["grpc"], slowClients/5)
		took := closedWithin(t, conns, start, headerTimeout+slack)
		t.Logf("%d silent gRPC connections cut, the last %v after the first dial", len(conns), took.Round(time.Millisecond))
	})

	t.Run("keep-alive", func(t *testing.T) {
		c := dialAll(t, p.addrs["gateway"], 1)[0]
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(c)
		status, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(status, "HTTP/1.1 200") {
			t.Fatalf("first request: %q %v", status, err)
		}
		start := time.Now()
		c.SetReadDeadline(start.Add(idleTimeout + slack))
		_, err = io.Copy(io.Discard, br)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("a keep-alive connection was still open %v after its response (idle timeout %v)", idleTimeout+slack, idleTimeout)
		}
		if took := time.Since(start); took < idleTimeout/2 {
			t.Errorf("closed after %v, before the idle timeout %v", took, idleTimeout)
		}
	})
}

// TestConnectionCap fills the gateway to --max-conns with kept-alive
// connections: a further connection is answered 503 and closed at once,
// counted, while /healthz and /metrics on the admin listener still
// answer; once a connection closes, a new one is served.
func TestConnectionCap(t *testing.T) {
	const maxConns = 50
	p := start(t, nil, "--max-conns", fmt.Sprint(maxConns), "--idle-timeout", "1m", "--read-header-timeout", "1m")
	conns := dialAll(t, p.addrs["gateway"], maxConns)
	for i, c := range conns { // a served request (admitted or not): the connection holds a slot
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := readResponse(c)
		if err != nil || !strings.HasPrefix(resp, "HTTP/1.1 200") && !strings.HasPrefix(resp, "HTTP/1.1 429") {
			t.Fatalf("connection %d: %q %v", i, resp, err)
		}
	}
	extra := dialAll(t, p.addrs["gateway"], 1)[0]
	began := time.Now()
	extra.SetReadDeadline(began.Add(10 * time.Second))
	got, err := io.ReadAll(extra)
	if !strings.HasPrefix(string(got), "HTTP/1.1 503") {
		t.Fatalf("connection %d: read %q, %v; want a 503 and the connection closed", maxConns+1, got, err)
	}
	t.Logf("connection %d refused in %v", maxConns+1, time.Since(began).Round(time.Millisecond))
	if r := get(t, p.url("admin", "/healthz")); r.status != 200 {
		t.Errorf("/healthz with the gateway full: %d", r.status)
	}
	if n := metric(t, p, `sluice_connections_refused_total{listener="gateway"}`); n < 1 {
		t.Errorf("sluice_connections_refused_total = %v, want at least 1", n)
	}
	conns[0].Close()
	waitFor(t, "a slot freed by a closed connection", func() bool {
		c, err := net.DialTimeout("tcp", p.addrs["gateway"], 5*time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, _ := readResponse(c)
		return strings.HasPrefix(resp, "HTTP/1.1 200") || strings.HasPrefix(resp, "HTTP/1.1 429")
	})
}

// readResponse reads one HTTP/1.1 response with a Content-Length body from
// c and returns its status line.
func readResponse(c net.Conn) (string, error) {
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	if err != nil {
		return status, err
	}
	n := 0
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return status, err
		}
		if l == "\r\n" {
			break
		}
		if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "Content-Length") {
			fmt.Sscan(strings.TrimSpace(v), &n)
		}
	}
	_, err = io.CopyN(io.Discard, br, int64(n))
	return status, err
}

// TestH2Preface sends the HTTP/2 connection preface in clear to the
// gateway: it is answered 505 and never forwarded upstream.
func TestH2Preface(t *testing.T) {
	var forwarded atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { forwarded.Add(1) }))
	defer up.Close()
	p := start(t, nil, "--upstream", up.URL)
	c := dialAll(t, p.addrs["gateway"], 1)[0]
	io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(got), "HTTP/1.1 505") {
		t.Errorf("the preface was answered %q, want 505", got)
	}
	if n := forwarded.Load(); n != 0 {
		t.Errorf("the upstream received %d requests", n)
	}
}

// TestFileLimitWarning: caps that add up to more file descriptors than
// the process may open, or no cap at all, are warned about at start.
func TestFileLimitWarning(t *testing.T) {
	p := start(t, nil, "--max-conns", "1000000000", "--admin-max-conns", "-1")
	for _, want := range []string{"the connection caps add up to more file descriptors", `"listener":"admin"`} {
		if !strings.Contains(p.logs(), want) {
			t.Errorf("the log does not say %q", want)
		}
	}
}
