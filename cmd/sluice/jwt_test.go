package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/jwttest"
)

// claimsPolicy is the policy: per-user limits keyed by a verified
// claim, a pro plan ten times as large; a rule whose match is a CEL
// expression.
const claimsPolicy = `
trusted_proxies: [127.0.0.1/32]
jwt: {jwks_file: jwks.json, issuer: "https://issuer.example", audience: api}
rules:
  - name: api
    match: {path: /api/}
    limits:
      - name: per-user
        key: jwt:sub
        on_missing: refuse
        algorithm: fixed_window
        rate: 3/h
        overrides:
          - {claim: plan, equals: pro, scale: 10}
  - name: v2
    match: {path: /v2only/, expr: 'request.headers["x-api-version"] == "2"'}
    limits:
      - {name: v2-ip, key: ip, algorithm: fixed_window, rate: 2/h}
`

// TestServeJWTClaims runs a real sluice serve in front of a stand-in
// upstream: a free user's token gets 3 of 5, a pro user's 12 of 12, a
// forged token claiming pro 0 of 5; a key added to jwks.json verifies
// without a restart; the decision API reads the same tokens.
func TestServeJWTClaims(t *testing.T) {
	dir := t.TempDir()
	k1, k2 := jwttest.NewKey(t, "k1"), jwttest.NewKey(t, "k2")
	jwks := filepath.Join(dir, "jwks.json")
	jwttest.WriteJWKS(t, jwks, k1)
	path := filepath.Join(dir, "policy.yaml")
	writeFile(t, path, claimsPolicy)
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Add(1) }))
	defer up.Close()
	p := start(t, nil, "--upstream", up.URL, "--policy", path)
	gw := p.url("gateway", "/api/orders")
	through := func(n int, token string) (ok int, statuses []int) {
		for range n {
			r := get(t, gw, "Authorization", "Bearer "+token)
			statuses = append(statuses, r.status)
			if r.status == http.StatusOK {
				ok++
			}
		}
		return ok, statuses
	}
	if ok, st := through(5, k1.Token(t, "free-user", "free")); ok != 3 || st[3] != http.StatusTooManyRequests {
		t.Errorf("free user: %d of 5 (%v), want 3 then 429", ok, st)
	}
	if ok, st := through(12, k1.Token(t, "pro-user", "pro")); ok != 12 {
		t.Errorf("pro user: %d of 12 (%v)", ok, st)
	}
	forged := jwttest.NewKey(t, "k1").Sign(t, jwttest.Claims(time.Now(), map[string]any{"sub": "mallory", "plan": "pro"}))
	if ok, st := through(5, forged); ok != 0 || st[0] != http.StatusBadRequest {
		t.Errorf("forged pro token: %d of 5 (%v), want 0 and 400s", ok, st)
	}
	if ok, st := through(5, jwttest.None("k1", jwttest.Claims(time.Now(), map[string]any{"sub": "mallory", "plan": "pro"}))); ok != 0 {
		t.Errorf("alg none: %d of 5 (%v)", ok, st)
	}

	// Rotation: k2 is unknown until jwks.json holds it, then verifies
	// without a restart (the file is looked at again within a second).
	rotated := k2.Token(t, "rotated-user", "")
	if ok, _ := through(1, rotated); ok != 0 {
		t.Fatal("a token of a key not yet in the set got through")
	}
	jwttest.WriteJWKS(t, jwks, k1, k2)
	deadline := time.Now().Add(20 * time.Second)
	for ok, _ := through(1, rotated); ok == 0; ok, _ = through(1, rotated) {
		if time.Now().After(deadline) {
			t.Fatalf("a key added to jwks.json still does not verify after 20s; logs:\n%s", p.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The expression rule limits only version-2 requests.
	version := func(n int, v string) (ok int) {
		for range n {
			if get(t, p.url("gateway", "/v2only/x"), "X-Api-Version", v).status == http.StatusOK {
				ok++
			}
		}
		return ok
	}
	if ok := version(4, "1"); ok != 4 {
		t.Errorf("version 1: %d of 4, want 4", ok)
	}
	if ok := version(4, "2"); ok != 2 {
		t.Errorf("version 2: %d of 4, want 2", ok)
	}
	if ok := version(2, "1"); ok != 2 {
		t.Errorf("version 1 after version 2 was refused: %d of 2, want 2", ok)
	}
	if want := int64(3 + 12 + 1 + 4 + 2 + 2); reached.Load() != want {
		t.Errorf("the upstream saw %d requests, want %d", reached.Load(), want)
	}

	// The decision API: the token in request.headers.Authorization.
	api := p.url("api", "/v1/check")
	for tok, want := range map[string]bool{k1.Token(t, "api-user", ""): true, forged: false} {
		body, _ := json.Marshal(map[string]any{"request": map[string]any{"path": "/api/x", "ip": "203.0.113.9",
			"headers": map[string]string{"Authorization": "Bearer " + tok}}})
		r := do(t, "POST", api, string(body))
		var ans struct{ Allowed bool }
		json.Unmarshal([]byte(r.body), &ans)
		if ans.Allowed != want || want && r.status != http.StatusOK || !want && r.status != http.StatusBadRequest {
			t.Errorf("decision API: status %d, allowed %v; want allowed %v (%s)", r.status, ans.Allowed, want, r.body)
		}
	}
	// The decision API matches the expression rule as the gateway does.
	allowed := 0
	for _, v := range []string{"2", "2", "2", "1"} {
		body, _ := json.Marshal(map[string]any{"request": map[string]any{"path": "/v2only/x", "ip": "203.0.113.10",
			"headers": map[string]string{"X-Api-Version": v}}})
		var ans struct{ Allowed bool }
		json.Unmarshal([]byte(do(t, "POST", api, string(body)).body), &ans)
		if ans.Allowed {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("decision API, versions 2, 2, 2, 1: %d allowed, want 3", allowed)
	}
}

// TestServeJWKSUnreachable: a jwks_url that fails leaves sluice serving,
// and every token a missing key part (on_missing: refuse), never an
// admission.
func TestServeJWKSUnreachable(t *testing.T) {
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer idp.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	writeFile(t, path, `
jwt: {jwks_url: "`+idp.URL+`", issuer: "https://issuer.example", audience: api}
rules:
  - name: api
    limits:
      - {name: per-user, key: jwt:sub, on_missing: refuse, algorithm: fixed_window, rate: 3/h}
`)
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Add(1) }))
	defer up.Close()
	p := start(t, nil, "--upstream", up.URL, "--policy", path)
	k := jwttest.NewKey(t, "k1")
	for range 3 {
		if r := get(t, p.url("gateway", "/x"), "Authorization", "Bearer "+k.Token(t, "u", "")); r.status != http.StatusBadRequest {
			t.Fatalf("status %d, want 400", r.status)
		}
	}
	if reached.Load() != 0 {
		t.Fatalf("the upstream saw %d requests", reached.Load())
	}
}

// TestCheckNamesExpressionErrors: sluice check names the file, line, rule
// and the expression's own error.
func TestCheckNamesExpressionErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, bad, `rules:
  - name: v2
    match: {path: /v2only/, expr: 'request.headers["x-api-version"] = "2"'}
    limits:
      - {name: v2-ip, key: ip, algorithm: fixed_window, rate: 2/h}
`)
	out, _, code := runSluice(t, "check", bad)
	want := bad + `:3: rule "v2": match.expr: expression "request.headers[\"x-api-version\"] = \"2\"": ERROR: <input>:1:34: Syntax error`
	if code != exitInvalid || !strings.Contains(out, want) {
		t.Errorf("exit %d:\n%s\nwant %q", code, out, want)
	}
}
