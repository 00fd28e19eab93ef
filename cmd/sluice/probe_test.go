package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// burstPolicy has one rule without on_error: a burst of 50, then 1 an hour.
func burstPolicy(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, `
rules:
  - name: all
    match: {path: /}
    limits:
      - {name: burst, key: global, algorithm: token_bucket, rate: 1/h, burst: 50}
`)
	return path
}

// TestServeStoreMisconfigured: a wrong Redis address or password is not
// silent. sluice serve says at start, in a line of its JSON log, that the
// store does not answer and why it may be; /readyz?degraded=ok answers 503
// (the store never answered, or refused the credentials: not an outage
// the failure modes should hide); the default failure mode, fallback,
// admits a burst of 50 out of 60, not 60; go-redis's own lines are JSON
// like the rest; and with --redis-require sluice refuses to start.
func TestServeStoreMisconfigured(t *testing.T) {
	locked := redistest.StartProcess(t, "--requirepass", "sesame")
	for _, tc := range []struct {
		name, addr, hint string
		env              []string
	}{
		{"wrong address", deadAddr(t), "check store.redis.addrs", nil},
		{"wrong password", locked.Addr, "check store.redis.username and password", []string{"SLUICE_REDIS_PASSWORD=open"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t, tc.env, "--store", "redis", "--redis-addrs", tc.addr, "--policy", burstPolicy(t))
			if logs := p.logs(); !strings.Contains(logs, "the store does not answer") || !strings.Contains(logs, tc.hint) {
				t.Errorf("no warning at start saying the store does not answer and %q", tc.hint)
			}
			if r := get(t, p.url("admin", "/readyz?degraded=ok")); r.status != 503 {
				t.Errorf("/readyz?degraded=ok: %d %s, want 503", r.status, r.body)
			}
			admitted := 0
			for range 60 {
				if get(t, p.url("gateway", "/")).status == 200 {
					admitted++
				}
			}
			if admitted != 50 {
				t.Errorf("a burst of 50 admitted %d of 60 with the store unreachable, want 50 (fallback)", admitted)
			}
			p.signal(syscall.SIGTERM)
			p.wait(30 * time.Second)
			for _, line := range strings.Split(strings.TrimSpace(p.logs()), "\n") {
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Errorf("a log line that is not JSON: %s", line)
				}
			}
		})
	}
	t.Run("required", func(t *testing.T) {
		cmd := execSluice(append(append([]string(nil), serveArgs...), "--store", "redis", "--redis-addrs", deadAddr(t), "--redis-require")...)
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != exitInvalid || !strings.Contains(string(out), "does not answer (store.redis.require is set)") {
			t.Errorf("exit %d, output:\n%s\nwant exit 1 saying the store does not answer", code, out)
		}
	})
	t.Run("right password", func(t *testing.T) {
		p := start(t, []string{"SLUICE_REDIS_PASSWORD=sesame"}, "--store", "redis", "--redis-addrs", locked.Addr, "--redis-require")
		if r := get(t, p.url("admin", "/readyz")); r.status != 200 {
			t.Errorf("/readyz: %d %s", r.status, r.body)
		}
	})
}

// TestRedisLog: go-redis's lines go through slog, each message at most
// once per redisLogEvery, the next one saying how many were left out.
func TestRedisLog(t *testing.T) {
	var buf strings.Builder
	now := time.Unix(0, 0)
	l := newRedisLog(slog.New(slog.NewJSONHandler(&buf, nil)), func() time.Time { return now })
	for range 3 {
		l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 1, "refused")
	}
	l.Printf(context.Background(), "redis: another message")
	now = now.Add(redisLogEvery)
	l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 1, "refused")
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec struct {
			Level, Msg, Component string
			Repeated              int
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		got = append(got, fmt.Sprintf("%s %s %s %d", rec.Level, rec.Component, rec.Msg, rec.Repeated))
	}
	want := []string{
		"WARN go-redis connection pool: failed to dial after 1 attempts: refused 0",
		"WARN go-redis another message 0",
		"WARN go-redis connection pool: failed to dial after 1 attempts: refused 2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
