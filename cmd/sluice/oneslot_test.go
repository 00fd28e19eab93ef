package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

const oneSlotPolicy = `
rules:
  - name: orders
    match: {path: /orders}
    one_slot: true
    limits:
      - {name: orders-running, key: global, algorithm: concurrency, limit: 1}
      - {name: orders-user, key: header:X-User, algorithm: fixed_window, limit: 2, window: 1h}
  - name: llm
    match: {path: /v1/}
    one_slot: true
    limits:
      - name: tokens
        key: header:X-User
        algorithm: fixed_window
        limit: 10000
        window: 30d
        cost: {reserve: 100, response_header: X-Tokens-Used, max: 5000}
`

// TestServeOneSlotOperations: on a Redis Cluster, a rule with one_slot
// keeps every key it plans on one slot, and each operation that names one
// of its keys later finds it there: /v1/release frees the place a lease
// held, sluice keys reset forgets a client's usage, /v1/settle charges
// the actual cost to the key the check reserved on. Had any of them named
// the key with another slot, it would have missed the state (the place
// stays taken, the usage stays spent, the charge lands on a key of its
// own); every key in Redis carries its rule's hash tag.
func TestServeOneSlotOperations(t *testing.T) {
	c := redistest.Cluster(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, oneSlotPolicy)
	prefix := redistest.Prefix(t)
	s := oneSlotServer{t: t, p: start(t, nil, "--store", "redis", "--redis-addrs", joinComma(c.Options().Addrs),
		"--redis-mode", "cluster", "--redis-prefix", prefix, "--policy", policy, "--redis-timeout", "5s")}

	ann := s.check("/orders", "ann", 1)
	if !ann.Allowed {
		t.Fatalf("ann's first order: %+v", ann)
	}
	if b := s.check("/orders", "bob", 1); b.Allowed {
		t.Fatalf("bob's order while ann's runs: %+v", b)
	}
	s.release(ann)
	bob := s.check("/orders", "bob", 1)
	if !bob.Allowed {
		t.Fatalf("bob's order after ann's release: %+v (the release missed the lease's key)", bob)
	}
	s.release(bob)
	s.release(s.check("/orders", "ann", 1)) // ann's second: her window is spent
	if a := s.check("/orders", "ann", 1); a.Allowed {
		t.Fatalf("ann's third order in the window: %+v", a)
	}
	if code, out, errs := sluiceKeys("reset", "orders", "orders-user", "ann", "--admin", s.p.addrs["admin"]); code != 0 || !strings.Contains(out, "remaining 2;") {
		t.Fatalf("reset: %d\n%s%s", code, out, errs)
	}
	s.release(s.check("/orders", "ann", 1)) // admitted again: the reset found her key

	token := s.check("/v1/chat", "alice", 1).SettleToken
	if token == "" {
		t.Fatal("no settle token for a reserving check")
	}
	if r := do(t, "POST", s.p.url("api", "/v1/settle"), `{"token": "`+token+`", "cost": 3000}`, "Content-Type", "application/json"); r.status != 200 {
		t.Fatalf("settle: %d %s", r.status, r.body)
	}
	if left := s.check("/v1/chat", "alice", 0).Decisions[0].Remaining; left != 7000 {
		t.Errorf("alice has %d tokens left after a settle of 3,000, want 7,000 (the settle missed the reserved key)", left)
	}
	checkSlotTags(t, c, prefix, "{8:6:orders}", "{5:3:llm}")
}

// oneSlotServer is a sluice serve whose decision API a test calls.
type oneSlotServer struct {
	t *testing.T
	p *proc
}

// oneSlotAnswer is what the test reads of a /v1/check answer.
type oneSlotAnswer struct {
	Allowed     bool
	SettleToken string `json:"settle_token"`
	Decisions   []struct {
		Name      string
		Key       string
		Remaining int64
		Lease     uint64
	}
}

// check asks /v1/check about a request for path by user, of cost hits.
func (s oneSlotServer) check(path, user string, hits int) oneSlotAnswer {
	s.t.Helper()
	r := do(s.t, "POST", s.p.url("api", "/v1/check"),
		fmt.Sprintf(`{"request": {"path": %q, "headers": {"X-User": %q}}, "hits": %d}`, path, user, hits), "Content-Type", "application/json")
	var a oneSlotAnswer
	if err := json.Unmarshal([]byte(r.body), &a); err != nil || r.status != 200 {
		s.t.Fatalf("check %s for %s: %d %s", path, user, r.status, r.body)
	}
	return a
}

// release gives back the lease of orders-running a holds, by /v1/release.
func (s oneSlotServer) release(a oneSlotAnswer) {
	s.t.Helper()
	d := a.Decisions[0]
	if d.Name != "orders-running" || d.Lease == 0 {
		s.t.Fatalf("no lease of orders-running in %+v", a)
	}
	rel := fmt.Sprintf(`{"name": "orders-running", "key": %q, "lease": %d}`, d.Key, d.Lease)
	if r := do(s.t, "POST", s.p.url("api", "/v1/release"), rel, "Content-Type", "application/json"); r.status != 204 {
		s.t.Fatalf("release: %d %s", r.status, r.body)
	}
}

// checkSlotTags checks that every state key under prefix (the census of
// instances keeps a key of its own) starts with one of tags, its rule's
// hash tag.
func checkSlotTags(t *testing.T, c redis.UniversalClient, prefix string, tags ...string) {
	t.Helper()
	n := 0
	for _, k := range redistest.Keys(t, c, prefix) {
		if !strings.HasSuffix(k, ":s") && !strings.HasSuffix(k, ":l") {
			continue
		}
		n++
		ok := false
		for _, tag := range tags {
			ok = ok || strings.HasPrefix(k, prefix+tag)
		}
		if !ok {
			t.Errorf("key %q is not on its rule's slot (%s)", k, strings.Join(tags, ", "))
		}
	}
	if n < 4 {
		t.Errorf("%d state keys in Redis, want at least 4", n)
	}
}
