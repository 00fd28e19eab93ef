package main

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestRedisTLS runs sluice on a redis-server that speaks TLS on its
// tls-port with certificates made here, requires a client certificate
// (tls-auth-clients) and an ACL user's password: with rediss://, the CA,
// the client certificate, the server name and the password from a file,
// decisions are made in Redis; without the client certificate, with a
// wrong password or a server name the certificate lacks, /readyz says the
// store does not answer.
func TestRedisTLS(t *testing.T) {
	if out, err := exec.Command("redis-server", "--version").Output(); err != nil || !strings.Contains(string(out), "v=") {
		if os.Getenv("CI") != "" {
			t.Fatalf("no redis-server (scripts/test installs it): %v", err)
		}
		t.Skip("no redis-server: run ./scripts/test, which installs it")
	}
	ca := newPKI(t, "redis-test")
	srvCert, srvKey, _ := ca.issue("redis")
	cliCert, cliKey, cliPair := ca.issue("sluice")
	tlsPort := freePort(t)
	redistest.StartProcess(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", srvCert, "--tls-key-file", srvKey,
		"--tls-ca-cert-file", ca.caFile, "--tls-auth-clients", "yes",
		"--user", "sluice", "on", ">s3cret-pass", "~*", "&*", "+@all")
	tlsAddr := "127.0.0.1:" + strconv.Itoa(tlsPort)
	dir := t.TempDir()
	pwFile, badPw := filepath.Join(dir, "password"), filepath.Join(dir, "bad")
	writeFile(t, pwFile, "s3cret-pass\n")
	writeFile(t, badPw, "guess\n")
	prefix := redistest.Prefix(t)
	args := func(pw string, withCert bool, serverName string) []string {
		a := []string{"--store", "redis", "--redis-addrs", "rediss://" + tlsAddr, "--redis-tls-ca", ca.caFile,
			"--redis-password-file", pw, "--redis-prefix", prefix, "--redis-timeout", "500ms", "--redis-tls-server-name", serverName}
		if withCert {
			a = append(a, "--redis-tls-cert", cliCert, "--redis-tls-key", cliKey)
		}
		return a
	}
	user := []string{"SLUICE_REDIS_USERNAME=sluice"}

	p := start(t, user, args(pwFile, true, "localhost")...) // the certificate's DNS name, not the address
	if r := get(t, p.url("admin", "/readyz")); r.status != 200 {
		t.Fatalf("/readyz over TLS: %d %q", r.status, r.body)
	}
	const check = `{"checks":[{"name":"n","key":"tls","limit":{"algorithm":"fixed_window","limit":2,"window":"1h"}}]}`
	for i, want := range []string{`"allowed":true`, `"allowed":true`, `"allowed":false`} {
		if r := do(t, "POST", p.url("api", "/v1/check"), check); !strings.Contains(r.body, want) || strings.Contains(r.body, `"degraded":true`) {
			t.Fatalf("check %d: %d %q, want %s, not degraded", i+1, r.status, r.body, want)
		}
	}
	// The counts are in Redis, read here over TLS as the same user.
	c := redis.NewClient(&redis.Options{Addr: tlsAddr, Username: "sluice", Password: "s3cret-pass",
		TLSConfig: &tls.Config{RootCAs: ca.pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{cliPair}}})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if keys, err := c.Keys(ctx, prefix+"*").Result(); err != nil || len(keys) == 0 {
		t.Errorf("keys under %q in Redis: %v %v, want some", prefix, keys, err)
	}

	for _, c := range []struct {
		name string
		args []string
		why  string // in /readyz's answer
	}{
		{"without a client certificate", args(pwFile, false, "localhost"), "certificate required"},
		{"with a wrong password", args(badPw, true, "localhost"), "WRONGPASS"},
		{"with a server name the certificate lacks", args(pwFile, true, "redis.example"), "not redis.example"},
	} {
		q := start(t, user, c.args...)
		// Each /readyz probes the store afresh. Under TLS 1.3 a server that
		// requires a client certificate says so only after the handshake:
		// a client that writes before the alert arrives can read a reset
		// instead (seen on a loaded machine). Every answer must be 503; at
		// least one of a few must give the reason.
		var r response
		for try := 0; try < 8; try++ {
			if r = get(t, q.url("admin", "/readyz")); r.status != 503 || strings.Contains(r.body, c.why) {
				break
			}
		}
		if r.status != 503 || !strings.Contains(r.body, c.why) {
			t.Errorf("%s: /readyz %d %q, want 503 saying %q", c.name, r.status, r.body, c.why)
		}
	}
}
