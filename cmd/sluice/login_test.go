package main

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestServeLoginBan is the login example of docs/config.md through sluice
// serve on Redis, in front of an upstream that answers 401 to a wrong
// password: three failed logins from one address get 401s; the fourth, and
// a right password 2.5s later (after the 2s window refilled), get 429 with
// the ban's Retry-After; a right password from another address is never
// limited. sluice keys bans lists the ban, inspect shows it, and reset
// lifts it.
func TestServeLoginBan(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	t.Cleanup(upstream.Close)
	rdb := redistest.Standalone(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, `
trusted_proxies: [127.0.0.1/32]
rules:
  - name: login
    match: {methods: [POST], path: /login}
    limits:
      - {name: login-failures, key: ip, algorithm: fixed_window, rate: 3/2s, count_when: {status: [401]}, ban: 30s}
`)
	p := start(t, nil, "--policy", policy, "--upstream", upstream.URL, "--store", "redis", "--redis-addrs", rdb.Options().Addr,
		"--redis-prefix", redistest.Prefix(t), "--redis-timeout", "5s")
	login := func(from, password string) response {
		t.Helper()
		return do(t, "POST", p.url("gateway", "/login"), url.Values{"password": {password}}.Encode(),
			"Content-Type", "application/x-www-form-urlencoded", "X-Forwarded-For", from)
	}
	// The window is aligned to multiples of 2s: the four failures must
	// fall in one, which a loaded machine may not manage; a try that
	// straddles a boundary is tried again from another address.
	var from string
	for try := 0; ; try++ {
		from = "192.0.2." + strconv.Itoa(try+1)
		start := time.Now().Truncate(2 * time.Second).Add(2*time.Second + 50*time.Millisecond)
		time.Sleep(time.Until(start))
		var got []int
		for range 4 {
			got = append(got, login(from, "wrong").status)
		}
		if time.Since(start) < 1900*time.Millisecond {
			if want := []int{401, 401, 401, 429}; !equalStatuses(got, want) {
				t.Fatalf("four failed logins from %s: %v, want %v", from, got, want)
			}
			break
		}
		if try == 2 {
			t.Fatalf("four requests never fit in one 2s window (the machine is too slow to tell)")
		}
	}
	banned := time.Now()
	if r := login("198.51.100.9", "right"); r.status != 200 {
		t.Errorf("a right password from another address during the ban: %d, want 200", r.status)
	}
	time.Sleep(2500*time.Millisecond - time.Since(banned))
	r := login(from, "right")
	ra, _ := strconv.Atoi(r.header.Get("Retry-After"))
	if left := 30 - time.Since(banned).Seconds(); r.status != 429 || float64(ra) < left-1 || float64(ra) > left+1 {
		t.Errorf("a right password 2.5s later: %d, Retry-After %q; want 429 with the ban's %.1fs left", r.status, r.header.Get("Retry-After"), left)
	}
	for range 5 {
		if r := login("198.51.100.9", "right"); r.status != 200 {
			t.Errorf("a right password from another address: %d, want 200", r.status)
		}
	}
	out, errOut, code := runSluice(t, "keys", "inspect", "--admin", p.addrs["admin"], "login", "login-failures", from)
	if code != 0 || !strings.Contains(out, "banned for 2") || !strings.Contains(out, "ban: 30s") {
		t.Errorf("sluice keys inspect: exit %d:\n%s%s\nwant the ban's time left", code, out, errOut)
	}
	out, errOut, code = runSluice(t, "keys", "bans", "--admin", p.addrs["admin"])
	if code != 0 || !strings.Contains(out, "login-failures") || strings.Count(out, "\n") != 3 {
		t.Errorf("sluice keys bans: exit %d:\n%s%s\nwant the one banned key", code, out, errOut)
	}
	if _, errOut, code := runSluice(t, "keys", "reset", "--admin", p.addrs["admin"], "login", "login-failures", from); code != 0 {
		t.Fatalf("sluice keys reset: exit %d: %s", code, errOut)
	}
	if out, _, _ := runSluice(t, "keys", "bans", "--admin", p.addrs["admin"]); out != "no key is banned\n" {
		t.Errorf("sluice keys bans after the reset:\n%s", out)
	}
	if r := login(from, "right"); r.status != 200 {
		t.Errorf("a right password after sluice keys reset lifted the ban: %d, want 200", r.status)
	}
}

func equalStatuses(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestServeBanIndexFails: a ban is written in the index of bans before it
// starts, so none runs unlisted. With a string where the index's sorted
// set belongs (every write of the index fails on Redis: WRONGTYPE), a
// refusal starts no ban: the key is refused by its limit alone, and once
// the window refills it is admitted again. With the index repaired, the
// next refusal starts a ban, which sluice keys bans lists.
func TestServeBanIndexFails(t *testing.T) {
	rdb := redistest.Standalone(t)
	prefix := redistest.Prefix(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, `
rules:
  - name: tenant
    limits:
      - {name: per-tenant, key: "header:X-Tenant", algorithm: fixed_window, rate: 1/2s, ban: 30s}
`)
	p := start(t, nil, "--policy", policy, "--store", "redis", "--redis-addrs", rdb.Options().Addr,
		"--redis-prefix", prefix, "--redis-timeout", "5s")
	ctx := t.Context()
	if err := rdb.Set(ctx, prefix+"{bans}", "not a sorted set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Two requests in one 2s window (a try that straddles a boundary is
	// tried again under another tenant): the second is refused.
	exhaust := func(name string) string {
		for try := 0; ; try++ {
			tenant := name + strconv.Itoa(try)
			start := time.Now()
			got := []int{get(t, p.url("gateway", "/x"), "X-Tenant", tenant).status, get(t, p.url("gateway", "/x"), "X-Tenant", tenant).status}
			if time.Now().Truncate(2 * time.Second).Equal(start.Truncate(2 * time.Second)) {
				if !equalStatuses(got, []int{200, 429}) {
					t.Fatalf("two requests of %s in one window: %v, want 200 then 429", tenant, got)
				}
				return tenant
			}
			if try == 4 {
				t.Fatal("two requests never fit in one 2s window (the machine is too slow to tell)")
			}
		}
	}
	tenant := exhaust("unlisted")
	p.waitLog("a ban could not be listed, so it was not started", 10*time.Second) // the log reaches the pipe after the answer
	out, errOut, code := runSluice(t, "keys", "inspect", "--admin", p.addrs["admin"], "tenant", "per-tenant", tenant)
	if code != 0 || strings.Contains(out, "banned for") {
		t.Errorf("sluice keys inspect after the index failed: exit %d:\n%s%s\nwant no ban", code, out, errOut)
	}
	next := time.Now().Truncate(2 * time.Second).Add(2 * time.Second)
	time.Sleep(time.Until(next))
	if r := get(t, p.url("gateway", "/x"), "X-Tenant", tenant); r.status != 200 {
		t.Errorf("%s in the next window, no ban started: %d, want 200", tenant, r.status)
	}

	if err := rdb.Del(ctx, prefix+"{bans}").Err(); err != nil {
		t.Fatal(err)
	}
	tenant = exhaust("listed")
	out, errOut, code = runSluice(t, "keys", "bans", "--admin", p.addrs["admin"])
	if code != 0 || !strings.Contains(out, "per-tenant") || strings.Count(out, "\n") != 3 {
		t.Errorf("sluice keys bans with the index repaired: exit %d:\n%s%s\nwant the one banned key", code, out, errOut)
	}
	time.Sleep(time.Until(time.Now().Truncate(2 * time.Second).Add(2 * time.Second)))
	if r := get(t, p.url("gateway", "/x"), "X-Tenant", tenant); r.status != 429 {
		t.Errorf("%s in the next window, banned: %d, want 429", tenant, r.status)
	}
}
