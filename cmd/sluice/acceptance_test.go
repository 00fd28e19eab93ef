package main

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/jwttest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// identityPolicy is the whole policy of the issue that brought verified
// claims, CEL, count_when, bans and runtime overrides: claimsPolicy and
// the login and tenant rules after it.
const identityPolicy = claimsPolicy + `  - name: login
    match: {methods: [POST], path: /login}
    limits:
      - {name: login-failures, key: ip, algorithm: fixed_window, rate: 3/2s, count_when: {status: [401]}, ban: 30s}
  - name: tenant
    match: {path: /tenant/}
    limits:
      - {name: per-tenant, key: "header:X-Tenant", algorithm: fixed_window, rate: 2/h}
`

// TestServeIdentityPolicy is the acceptance test of that policy: two sluice
// serve on one Redis in front of an upstream that answers 401 to a wrong
// password, every request sent by a real HTTP client, the requests of one
// key spread over both instances. A free user's token gets 3 of 5, a pro
// user's 12 of 12, a forged token claiming pro 0 of 5 (and every other
// token that does not verify a 400); the expression rule
// limits only version-2 requests (and those without a version, whose
// expression fails); three failed logins from one address get
// 401s, the fourth and a right password 2.5s later 429 (the window has
// refilled, the ban holds), a right password from another address is never
// limited; an override of scale 5 on acme set through one instance's admin
// API applies on the other within a second (measured), lets acme through 6
// of 6 there while other gets 2 of 4, and survives the other's restart.
func TestServeIdentityPolicy(t *testing.T) {
	dir := t.TempDir()
	key := jwttest.NewKey(t, "k1")
	jwttest.WriteJWKS(t, filepath.Join(dir, "jwks.json"), key)
	policy, tokens := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "tokens")
	writeFile(t, policy, identityPolicy)
	writeFile(t, tokens, "admin-s3cret\n")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/login" && r.FormValue("password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	t.Cleanup(up.Close)
	rdb := redistest.Standalone(t)
	args := []string{"--upstream", up.URL, "--policy", policy, "--auth-tokens", tokens, "--store", "redis",
		"--redis-addrs", rdb.Options().Addr, "--redis-prefix", redistest.Prefix(t), "--redis-timeout", "5s"}
	a, b := start(t, nil, args...), start(t, nil, args...)
	both := []*proc{a, b}

	// Verified claims: each user's requests alternate between the two.
	claims := func(n int, token string) (ok int, statuses []int) {
		for i := range n {
			r := get(t, both[i%2].url("gateway", "/api/orders"), "Authorization", "Bearer "+token)
			statuses = append(statuses, r.status)
			if r.status == http.StatusOK {
				ok++
			} else if r.status < 400 || r.status > 499 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
		}
		return ok, statuses
	}
	if ok, st := claims(5, key.Token(t, "free-user", "free")); ok != 3 || !equalStatuses(st[3:], []int{429, 429}) {
		t.Errorf("free user: %d of 5 (%v), want 3 then 429s", ok, st)
	}
	if ok, st := claims(12, key.Token(t, "pro-user", "pro")); ok != 12 {
		t.Errorf("pro user: %d of 12 (%v), want 12", ok, st)
	}
	forged := jwttest.NewKey(t, "k1").Sign(t, jwttest.Claims(time.Now(), map[string]any{"sub": "mallory", "plan": "pro"}))
	if ok, st := claims(5, forged); ok != 0 {
		t.Errorf("a forged token claiming pro: %d of 5 (%v), want 0", ok, st)
	}
	// Every other token that does not verify is a missing key part too
	// (on_missing: refuse): 400, never an admission.
	now := time.Now()
	pro := func(extra map[string]any) map[string]any {
		c := map[string]any{"sub": "mallory", "plan": "pro"}
		maps.Copy(c, extra)
		return jwttest.Claims(now, c)
	}
	for name, tok := range map[string]string{
		"expired":        key.Sign(t, pro(map[string]any{"exp": now.Add(-time.Hour).Unix()})),
		"not yet valid":  key.Sign(t, pro(map[string]any{"nbf": now.Add(time.Hour).Unix()})),
		"alg none":       jwttest.None("k1", pro(nil)),
		"HS256 confused": jwttest.HS256("k1", key.PublicJSON(), pro(nil)),
		"wrong audience": key.Sign(t, pro(map[string]any{"aud": "web"})),
		"wrong issuer":   key.Sign(t, pro(map[string]any{"iss": "https://evil.example"})),
		"unknown kid":    jwttest.NewKey(t, "k2").Sign(t, pro(nil)),
		"garbage":        "not.a.token",
	} {
		if ok, st := claims(3, tok); ok != 0 || !equalStatuses(st, []int{400, 400, 400}) {
			t.Errorf("%s token: %d of 3 (%v), want 400s", name, ok, st)
		}
	}

	// The expression rule: version 2 gets 2 of 4, other versions are not
	// limited by it. A request without the header fails the expression,
	// which applies the rule (docs/config.md, Expressions): dropping the
	// header does not escape the limit.
	versions := func(n int, v ...string) (ok int) {
		for i := range n {
			if get(t, both[i%2].url("gateway", "/v2only/x"), v...).status == http.StatusOK {
				ok++
			}
		}
		return ok
	}
	if ok := versions(4, "X-Api-Version", "2"); ok != 2 {
		t.Errorf("version 2: %d of 4, want 2", ok)
	}
	for _, v := range []string{"1", "3", "02"} {
		if ok := versions(6, "X-Api-Version", v); ok != 6 {
			t.Errorf("version %q: %d of 6, want 6", v, ok)
		}
	}
	if ok := versions(2); ok != 0 {
		t.Errorf("no version: %d of 2, want 0 (counted under the exhausted v2-ip)", ok)
	}

	testIdentityLogins(t, a, b)
	testIdentityOverride(t, a, b, args)
}

// testIdentityLogins: three failed logins from one address, through either
// instance, get 401s; the fourth, and a right password 2.5s later, 429; a
// right password from another address is never limited. Addresses are
// told apart by X-Forwarded-For from the trusted proxy 127.0.0.1.
func testIdentityLogins(t *testing.T, a, b *proc) {
	t.Helper()
	login := func(p *proc, from, password string) response {
		t.Helper()
		return do(t, "POST", p.url("gateway", "/login"), url.Values{"password": {password}}.Encode(),
			"Content-Type", "application/x-www-form-urlencoded", "X-Forwarded-For", from)
	}
	const other = "198.51.100.9"
	// The fixed window is aligned to multiples of 2s: the four failures
	// must fall in one. A try that starts 50ms into a window and whose
	// fourth answer comes back within 1.9s of it fits; one that does not
	// (a loaded machine) is tried again from another address.
	var from string
	var start, banned time.Time
	for try := 0; ; try++ {
		from = "192.0.2." + strconv.Itoa(try+1)
		start = time.Now().Truncate(2 * time.Second).Add(2*time.Second + 50*time.Millisecond)
		time.Sleep(time.Until(start))
		var got []int
		for i := range 4 {
			got = append(got, login([]*proc{a, b}[i%2], from, "wrong").status)
		}
		banned = time.Now()
		if banned.Sub(start) < 1900*time.Millisecond {
			if want := []int{401, 401, 401, 429}; !equalStatuses(got, want) {
				t.Fatalf("four failed logins from %s: %v, want %v", from, got, want)
			}
			break
		}
		if try == 2 {
			t.Fatalf("four logins never fit in one 2s window (the machine is too slow to tell)")
		}
	}
	if r := login(b, other, "right"); r.status != http.StatusOK {
		t.Errorf("a right password from another address during the ban: %d, want 200", r.status)
	}
	// The ban began before banned: 2.5s after banned it has held for
	// 2.5s at least, and the window, which ended by start+2s, has
	// refilled. It began after start: it holds until start+30s at least.
	time.Sleep(time.Until(banned.Add(2500 * time.Millisecond)))
	sent := time.Now()
	if sent.Sub(start) > 28*time.Second {
		t.Fatalf("the right password was sent %v into the ban (the machine is too slow to tell)", sent.Sub(start))
	}
	r := login(a, from, "right")
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	// Retry-After is the ban's time left when the request was decided,
	// between sent and now, rounded up to a second.
	most, least := 30-sent.Sub(banned).Seconds()+1, 30-time.Since(start).Seconds()
	if r.status != http.StatusTooManyRequests || err != nil || float64(ra) < least || float64(ra) > most {
		t.Errorf("a right password from %s %v after the ban began: %d, Retry-After %q; want 429 and %.1f to %.1f",
			from, sent.Sub(banned), r.status, r.header.Get("Retry-After"), least, most)
	}
	for i := range 6 {
		if r := login([]*proc{a, b}[i%2], other, "right"); r.status != http.StatusOK {
			t.Errorf("a right password from another address: %d, want 200", r.status)
		}
	}
}

// testIdentityOverride: an override set through a's admin API applies on b
// within a second and after b restarts.
func testIdentityOverride(t *testing.T, a, b *proc, args []string) {
	t.Helper()
	put := a.url("admin", "/admin/overrides/per-tenant/acme")
	if r := do(t, "PUT", put, `{"scale": 5}`); r.status != http.StatusUnauthorized {
		t.Fatalf("a PUT without the admin token: %d %s, want 401", r.status, r.body)
	}
	if r := do(t, "PUT", put, `{"scale": 5, "reason": "launch"}`, "Authorization", "Bearer admin-s3cret"); r.status != http.StatusOK {
		t.Fatalf("PUT %s: %d %s", put, r.status, r.body)
	}
	took := appliedWithin(t, b, 1)
	t.Logf("the override applied on the other instance %v after the PUT answered", took)
	if n := admitted(t, b, "acme", 6); n != 6 {
		t.Errorf("acme: %d of 6 on the other instance, want 6 (scale 5 of 2/h)", n)
	}
	if n := admitted(t, b, "other", 4); n != 2 {
		t.Errorf("other: %d of 4, want 2", n)
	}
	// Spelled otherwise, acme is another tenant under the file's limit.
	for _, tenant := range []string{"Acme", "ACME", "ac%6De", "acme."} {
		if n := admitted(t, b, tenant, 3); n != 2 {
			t.Errorf("tenant %q: %d of 3, want 2", tenant, n)
		}
	}
	b.signal(syscall.SIGTERM)
	b.wait(15 * time.Second)
	b = start(t, nil, args...)
	if n := admitted(t, b, "acme", 5); n != 4 {
		t.Errorf("acme after the other instance restarted: %d of 5, want the 4 left of 10", n)
	}
	if n := admitted(t, b, "other", 1); n != 0 {
		t.Errorf("other after the restart: %d of 1, want 0", n)
	}
}
