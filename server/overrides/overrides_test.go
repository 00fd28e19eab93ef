package overrides

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const testPolicy = `
trusted_proxies: [127.0.0.1/32]
rules:
  - name: tenant
    match: {path: /tenant/}
    limits:
      - {name: per-tenant, key: "header:X-Tenant", algorithm: fixed_window, rate: 2/h}
  - name: login
    match: {path: /login}
    limits:
      - {name: per-ip, key: ip, algorithm: token_bucket, rate: 1/s, burst: 3}
      - {name: pair, key: [header:X-A, header:X-B], algorithm: fixed_window, rate: 4/h}
`

// fixture is a Service over keeper k, with the test policy planning
// under it, and its admin API served over HTTP.
type fixture struct {
	svc     *Service
	pol     *policy.Policy
	srv     *httptest.Server
	changes atomic.Int64
	logs    *bytes.Buffer
}

func newFixture(t *testing.T, k Keeper) *fixture {
	t.Helper()
	f := &fixture{logs: &bytes.Buffer{}}
	var err error
	f.svc, err = New(Config{Keeper: k, Policy: func() *policy.Policy { return f.pol }, Logger: slog.New(slog.NewTextHandler(f.logs, nil)),
		Changed: func(string) { f.changes.Add(1) }, ShowKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	if f.pol, err = policy.Parse("test.yaml", []byte(testPolicy), policy.Options{Runtime: f.svc}); err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(f.svc.Handler())
	t.Cleanup(f.srv.Close)
	t.Cleanup(f.svc.Close)
	return f
}

func (f *fixture) do(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// plan plans a request to path with headers under the fixture's policy
// and returns its checks by limit name.
func (f *fixture) plan(t *testing.T, path, remote string, headers ...string) map[string]decide.Check {
	t.Helper()
	r := httptest.NewRequest("GET", path, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	checks, err := f.pol.Plan(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]decide.Check{}
	for _, c := range checks {
		out[c.Name] = c
	}
	return out
}

// TestPutRefusesBadRequests: whatever the caller sends that is not an
// override of a limit of the policy ends in a clear 4xx, and nothing is
// kept.
func TestPutRefusesBadRequests(t *testing.T) {
	f := newFixture(t, NewMemory())
	long := strings.Repeat("k", MaxKeyBytes+1)
	for _, tc := range []struct {
		name, path, body string
		status           int
		says             string
	}{
		{"bad JSON", "/admin/overrides/per-tenant/acme", `{"scale": `, 400, "not the JSON"},
		{"not an object", "/admin/overrides/per-tenant/acme", `[5]`, 400, "not the JSON"},
		{"two values", "/admin/overrides/per-tenant/acme", `{"scale": 5} {"scale": 6}`, 400, "more than one"},
		{"unknown field", "/admin/overrides/per-tenant/acme", `{"scale": 5, "scael": 6}`, 400, "unknown field"},
		{"unknown limit", "/admin/overrides/nope/acme", `{"scale": 5}`, 404, "no limit"},
		{"negative scale", "/admin/overrides/per-tenant/acme", `{"scale": -2}`, 400, "above 0"},
		{"zero scale", "/admin/overrides/per-tenant/acme", `{"scale": 0}`, 400, "above 0"},
		{"huge scale", "/admin/overrides/per-tenant/acme", `{"scale": 1e300}`, 400, "at most"},
		{"string scale", "/admin/overrides/per-tenant/acme", `{"scale": "5"}`, 400, "not the JSON"},
		{"nothing", "/admin/overrides/per-tenant/acme", `{"ttl": "1h"}`, 400, "give one of"},
		{"two", "/admin/overrides/per-tenant/acme", `{"scale": 2, "unlimited": true}`, 400, "give one of"},
		{"unlimited false", "/admin/overrides/per-tenant/acme", `{"unlimited": false}`, 400, "only true"},
		{"bad ttl", "/admin/overrides/per-tenant/acme", `{"scale": 2, "ttl": "soon"}`, 400, "ttl"},
		{"negative ttl", "/admin/overrides/per-tenant/acme", `{"scale": 2, "ttl": "-1h"}`, 400, "ttl"},
		{"huge ttl", "/admin/overrides/per-tenant/acme", `{"scale": 2, "ttl": "100000h"}`, 400, "ttl"},
		{"long reason", "/admin/overrides/per-tenant/acme", `{"scale": 2, "reason": "` + strings.Repeat("r", 501) + `"}`, 400, "reason"},
		{"huge body", "/admin/overrides/per-tenant/acme", `{"scale": 2, "reason": "` + strings.Repeat("r", MaxEntryBytes) + `"}`, 400, "longer than"},
		{"oversized key", "/admin/overrides/per-tenant/" + long, `{"scale": 2}`, 400, "longer than"},
		{"not an address", "/admin/overrides/per-ip/not-an-ip", `{"scale": 2}`, 400, "not a value"},
		{"one part of two", "/admin/overrides/pair/a", `{"scale": 2}`, 400, "not a value"},
		{"other algorithm", "/admin/overrides/per-tenant/acme", `{"limit": {"algorithm": "token_bucket", "rate": "1/s", "burst": 5}}`, 400, "same algorithm"},
		{"bad limit", "/admin/overrides/per-tenant/acme", `{"limit": {"algorithm": "fixed_window", "rate": "-1/h"}}`, 400, "does not apply"},
		{"limit not an object", "/admin/overrides/per-tenant/acme", `{"limit": 5}`, 400, "does not apply"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := f.do(t, "PUT", tc.path, tc.body)
			if status != tc.status || !strings.Contains(body, tc.says) {
				t.Errorf("%d %s: want %d saying %q", status, body, tc.status, tc.says)
			}
		})
	}
	if _, body := f.do(t, "GET", "/admin/overrides", ""); !strings.Contains(body, `"overrides":[]`) {
		t.Errorf("after refused PUTs the list is %s, want empty", body)
	}
	if n := f.changes.Load(); n != 0 {
		t.Errorf("%d changes counted, want 0", n)
	}
}

// TestOverridesApply: an override set through the API changes the checks
// planned at once (scale, unlimited, another limit), one line logs who set
// what, and a delete restores the policy's limit.
func TestOverridesApply(t *testing.T) {
	f := newFixture(t, NewMemory())
	put := func(path, body string) {
		t.Helper()
		if status, b := f.do(t, "PUT", path, body); status != 200 {
			t.Fatalf("PUT %s: %d %s", path, status, b)
		}
	}
	put("/admin/overrides/per-tenant/acme", `{"scale": 5, "ttl": "1h", "reason": "launch week"}`)
	if c := f.plan(t, "/tenant/x", "192.0.2.1:1", "X-Tenant", "acme")["per-tenant"]; c.Limit.Count != 10 {
		t.Errorf("acme's limit is %v, want 10/h", c.Limit)
	}
	if c := f.plan(t, "/tenant/x", "192.0.2.1:1", "X-Tenant", "other")["per-tenant"]; c.Limit.Count != 2 || c.Override != "" {
		t.Errorf("other's limit is %v (override %q), want the policy's 2/h", c.Limit, c.Override)
	}
	put("/admin/overrides/per-tenant/big", `{"limit": {"algorithm": "fixed_window", "rate": "100/h"}}`)
	if c := f.plan(t, "/tenant/x", "192.0.2.1:1", "X-Tenant", "big")["per-tenant"]; c.Limit.Count != 100 {
		t.Errorf("big's limit is %v, want 100/h", c.Limit)
	}
	put("/admin/overrides/per-tenant/free", `{"unlimited": true}`)
	if _, ok := f.plan(t, "/tenant/x", "192.0.2.1:1", "X-Tenant", "free")["per-tenant"]; ok {
		t.Error("free is checked against per-tenant, want unlimited")
	}
	log := f.logs.String()
	for _, want := range []string{"op=set limit=per-tenant key=acme", "override=\"scale 5\"", "ttl=1h0m0s", "reason=\"launch week\"", "by=127.0.0.1:"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q:\n%s", want, log)
		}
	}
	if status, b := f.do(t, "DELETE", "/admin/overrides/per-tenant/acme", ""); status != 200 {
		t.Fatalf("DELETE: %d %s", status, b)
	}
	if c := f.plan(t, "/tenant/x", "192.0.2.1:1", "X-Tenant", "acme")["per-tenant"]; c.Limit.Count != 2 {
		t.Errorf("after the delete acme's limit is %v, want 2/h", c.Limit)
	}
	if status, _ := f.do(t, "DELETE", "/admin/overrides/per-tenant/acme", ""); status != 404 {
		t.Errorf("a second DELETE answered %d, want 404", status)
	}
	if n := f.changes.Load(); n != 4 {
		t.Errorf("%d changes counted, want 4", n)
	}
}

// TestOverrideKeyForms: an override of an ip key applies to the address
// however the operator writes it, and a key is matched as planning bounds
// it (a long value by its digest).
func TestOverrideKeyForms(t *testing.T) {
	f := newFixture(t, NewMemory())
	for _, path := range []string{"/admin/overrides/per-ip/::ffff:192.0.2.7", "/admin/overrides/per-ip/2001:db8::1"} {
		if status, b := f.do(t, "PUT", path, `{"scale": 2}`); status != 200 {
			t.Fatalf("PUT %s: %d %s", path, status, b)
		}
	}
	long := strings.Repeat("t", decide.MaxKeyValue+10)
	if status, b := f.do(t, "PUT", "/admin/overrides/pair/"+long+"+b", `{"scale": 2}`); status != 200 {
		t.Fatalf("PUT a long key: %d %s", status, b)
	}
	if c := f.plan(t, "/login", "192.0.2.7:9"); c["per-ip"].Limit.Burst != 6 {
		t.Errorf("192.0.2.7's limit is %v, want its burst doubled", c["per-ip"].Limit)
	}
	if c := f.plan(t, "/login", "[2001:db8::ffff]:9"); c["per-ip"].Limit.Burst != 6 {
		t.Errorf("2001:db8::ffff (in 2001:db8::1's /64) has %v, want its burst doubled", c["per-ip"].Limit)
	}
	if c := f.plan(t, "/login", "192.0.2.8:9", "X-A", long, "X-B", "b"); c["pair"].Limit.Count != 8 {
		t.Errorf("the long pair's limit is %v, want 8/h", c["pair"].Limit)
	}
}

// TestOverridesExpire: an override stops applying at its expiry, and the
// next poll deletes it from the store, once, counted as an expiry.
func TestOverridesExpire(t *testing.T) {
	k := NewMemory()
	f := newFixture(t, k)
	e := Entry{Limit: "per-tenant", Key: "acme", Scale: 5, SetAt: time.Now(), ExpiresAt: time.Now().Add(-time.Second)}
	if err := k.Put(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	f.svc.poll()
	if c := f.plan(t, "/tenant/x", "192.0.2.1:1", "X-Tenant", "acme")["per-tenant"]; c.Limit.Count != 2 {
		t.Errorf("an expired override applies: %v", c.Limit)
	}
	f.svc.poll()
	if entries, _, _ := k.Load(context.Background()); len(entries) != 0 || f.changes.Load() != 1 {
		t.Errorf("after polls %d entries kept and %d changes counted, want none kept and 1 expiry", len(entries), f.changes.Load())
	}
}

// TestFileKeeperSurvivesRestart: on the memory store the overrides are in
// the state directory's file, and a new Service reads them from it.
func TestFileKeeperSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	k, err := NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, k)
	if status, b := f.do(t, "PUT", "/admin/overrides/per-tenant/acme", `{"scale": 5}`); status != 200 {
		t.Fatalf("PUT: %d %s", status, b)
	}
	k2, err := NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	f2 := newFixture(t, k2)
	if c := f2.plan(t, "/tenant/x", "192.0.2.1:1", "X-Tenant", "acme")["per-tenant"]; c.Limit.Count != 10 {
		t.Errorf("after a restart acme's limit is %v, want 10/h", c.Limit)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewFile(dir); err == nil || !strings.Contains(err.Error(), "move it away") {
		t.Errorf("a file that does not parse: %v, want an error that says what to do", err)
	}
}

// TestRedisKeeper: two Services on one Redis (two instances): a change
// through one applies on the other at its next poll; the hash is bounded.
func TestRedisKeeper(t *testing.T) {
	c := redistest.Standalone(t)
	prefix := redistest.Prefix(t)
	a, b := newFixture(t, NewRedis(c, prefix)), newFixture(t, NewRedis(c, prefix))
	if status, body := a.do(t, "PUT", "/admin/overrides/per-tenant/acme", `{"scale": 5, "ttl": "1h"}`); status != 200 {
		t.Fatalf("PUT: %d %s", status, body)
	}
	b.svc.poll()
	if c := b.plan(t, "/tenant/x", "192.0.2.1:1", "X-Tenant", "acme")["per-tenant"]; c.Limit.Count != 10 {
		t.Errorf("on the other instance acme's limit is %v, want 10/h", c.Limit)
	}
	_, body := b.do(t, "GET", "/admin/overrides", "")
	var list struct{ Overrides []Entry }
	if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Overrides) != 1 || list.Overrides[0].Scale != 5 {
		t.Errorf("the other instance lists %s", body)
	}
	if status, body := b.do(t, "DELETE", "/admin/overrides/per-tenant/acme", ""); status != 200 {
		t.Fatalf("DELETE: %d %s", status, body)
	}
	a.svc.poll()
	if c := a.plan(t, "/tenant/x", "192.0.2.1:1", "X-Tenant", "acme")["per-tenant"]; c.Limit.Count != 2 {
		t.Errorf("after the delete acme's limit is %v, want 2/h", c.Limit)
	}
}
