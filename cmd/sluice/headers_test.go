package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// sendHeader sends a GET of / to addr with a header field of n bytes,
// written as raw bytes, and returns the answer and its body.
func sendHeader(t *testing.T, addr string, n int) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	req := fmt.Sprintf("GET / HTTP/1.1\r\nHost: a.example\r\nX-Big: %s\r\nConnection: close\r\n\r\n", strings.Repeat("b", n))
	go conn.Write([]byte(req)) // the server may stop reading before the end
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("a header of %d bytes: %v", n, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestOversizedHeaders: a request whose header passes max_header_bytes
// (set here by SLUICE_MAX_HEADER_BYTES, and at its default) is answered
// 431 with a problem document, whether net/http stopped reading it (far
// over) or the request reached sluice's handler (a little over), on the
// gateway and on the decision API; it never reaches the upstream, and
// the gateway counts it in sluice_gateway_responses_total. A header under
// the setting is served.
func TestOversizedHeaders(t *testing.T) {
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Add(1) }))
	defer up.Close()
	const limit = 8 << 10
	p := start(t, []string{fmt.Sprintf("SLUICE_MAX_HEADER_BYTES=%d", limit)}, "--upstream", up.URL)
	if resp, _ := sendHeader(t, p.addrs["gateway"], limit-200); resp.StatusCode != 200 || reached.Load() != 1 {
		t.Fatalf("a header under the setting: %d, reached the upstream %d times", resp.StatusCode, reached.Load())
	}
	for _, listener := range []string{"gateway", "api"} {
		for _, n := range []int{limit + 100, 3 * limit, 200 << 10} {
			resp, body := sendHeader(t, p.addrs[listener], n)
			var doc struct {
				Type, Title string
				Status      int
			}
			err := json.Unmarshal([]byte(body), &doc)
			if resp.StatusCode != 431 || resp.Header.Get("Content-Type") != "application/problem+json" || err != nil || doc.Status != 431 {
				t.Errorf("%s, a header of %d bytes: %d %s %q; want 431 and a problem document", listener, n, resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
		}
	}
	if n := reached.Load(); n != 1 {
		t.Errorf("the upstream received %d requests, want 1", n)
	}
	if n := metric(t, p, `sluice_gateway_responses_total{code="431"}`); n != 3 {
		t.Errorf("sluice_gateway_responses_total{code=\"431\"} = %v, want 3", n)
	}

	d := start(t, nil, "--upstream", up.URL)
	if resp, _ := sendHeader(t, d.addrs["gateway"], 60<<10); resp.StatusCode != 200 {
		t.Errorf("default: a header of 60 KiB: %d, want 200", resp.StatusCode)
	}
	for _, n := range []int{66 << 10, 1 << 20} {
		if resp, body := sendHeader(t, d.addrs["gateway"], n); resp.StatusCode != 431 || !strings.Contains(body, `"status":431`) {
			t.Errorf("default: a header of %d bytes: %d %q, want a 431 problem document", n, resp.StatusCode, body)
		}
	}
}

// TestOversizedHeadersTLS: over TLS, HTTP/2 and HTTP/1.1, a header a
// little over max_header_bytes (set here by the flag) is answered 431 with
// a problem document and counted.
func TestOversizedHeadersTLS(t *testing.T) {
	ca := newPKI(t, "sluice-test")
	certFile, keyFile, _ := ca.issue("server")
	const limit = 8 << 10
	p := start(t, nil, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-listeners", "gateway", "--max-header-bytes", fmt.Sprint(limit))
	h1 := httpsClient(ca)
	h1.Transport.(*http.Transport).ForceAttemptHTTP2 = false
	h1.Transport.(*http.Transport).TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	for proto, c := range map[int]*http.Client{2: httpsClient(ca), 1: h1} {
		for n, want := range map[int]int{limit - 200: 200, limit + 1000: 431} {
			req, _ := http.NewRequest("GET", "https://"+p.addrs["gateway"]+"/", nil)
			req.Header.Set("X-Big", strings.Repeat("b", n))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("HTTP/%d, a header of %d bytes: %v", proto, n, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want || resp.ProtoMajor != proto || want == 431 && resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("HTTP/%d, a header of %d bytes: %d over %s, %s %q; want %d", proto, n, resp.StatusCode, resp.Proto, resp.Header.Get("Content-Type"), b, want)
			}
		}
	}
	if n := metric(t, p, `sluice_gateway_responses_total{code="431"}`); n != 2 {
		t.Errorf("sluice_gateway_responses_total{code=\"431\"} = %v, want 2", n)
	}
}
