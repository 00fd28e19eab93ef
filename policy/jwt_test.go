package policy_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/jwttest"
	"github.com/sluicehq/sluice/policy"
)

// jwtPolicy writes a key set of keys and a policy whose rule api keys
// per-user by jwt:sub (3/h, a pro plan ten times that), with onMissing.
func jwtPolicy(t *testing.T, onMissing string, keys ...*jwttest.Key) *policy.Policy {
	t.Helper()
	dir := t.TempDir()
	jwttest.WriteJWKS(t, filepath.Join(dir, "jwks.json"), keys...)
	file := filepath.Join(dir, "policy.yaml")
	err := os.WriteFile(file, fmt.Appendf(nil, `
jwt: {jwks_file: jwks.json, issuer: "https://issuer.example", audience: api}
rules:
  - name: api
    match: {path: /api/}
    limits:
      - name: per-user
        key: jwt:sub
        on_missing: %s
        algorithm: fixed_window
        rate: 3/h
        overrides:
          - {claim: plan, equals: pro, scale: 10}
`, onMissing), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(file, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// hostileTokens are bearer tokens that must yield no claims, each
// claiming the pro plan.
func hostileTokens(t *testing.T, good *jwttest.Key) map[string]string {
	now := time.Now()
	pro := func(extra map[string]any) map[string]any {
		c := map[string]any{"sub": "mallory", "plan": "pro"}
		for k, v := range extra {
			c[k] = v
		}
		return jwttest.Claims(now, c)
	}
	return map[string]string{
		"forged":         jwttest.NewKey(t, good.KID).Sign(t, pro(nil)),
		"expired":        good.Sign(t, pro(map[string]any{"exp": now.Add(-time.Hour).Unix()})),
		"alg none":       jwttest.None(good.KID, pro(nil)),
		"HS256 confused": jwttest.HS256(good.KID, good.PublicJSON(), pro(nil)),
		"wrong audience": good.Sign(t, pro(map[string]any{"aud": "other"})),
		"unknown kid":    jwttest.NewKey(t, "k-unknown").Sign(t, pro(nil)),
		"malformed":      "eyJhbGciOiJFUzI1NiJ9.e30",
		"oversized":      good.Sign(t, pro(map[string]any{"pad": strings.Repeat("x", 9<<10)})),
	}
}

// TestJWTClaimsOverHTTP: the per-user limit through httplimit. A
// free user gets 3 of 5, a pro user 12 of 12, and a token that does not
// verify (forged, expired, alg none, ...) claiming pro is refused (400)
// under on_missing: refuse, every time.
func TestJWTClaimsOverHTTP(t *testing.T) {
	good := jwttest.NewKey(t, "k1")
	srv := serve(t, jwtPolicy(t, "refuse", good))
	count := func(n int, headers ...string) (ok int, statuses []int) {
		for range n {
			r, _ := http.NewRequest("GET", srv.URL+"/api/x", nil)
			for i := 0; i+1 < len(headers); i += 2 {
				r.Header.Add(headers[i], headers[i+1]) // Add: a header given twice is sent twice
			}
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			statuses = append(statuses, resp.StatusCode)
			if resp.StatusCode == http.StatusOK {
				ok++
			}
		}
		return ok, statuses
	}
	if ok, st := count(5, "Authorization", "Bearer "+good.Token(t, "free-user", "free")); ok != 3 || st[3] != 429 {
		t.Errorf("free user: %d of 5 (%v), want 3 then 429", ok, st)
	}
	if ok, st := count(12, "Authorization", "Bearer "+good.Token(t, "pro-user", "pro")); ok != 12 {
		t.Errorf("pro user: %d of 12 (%v)", ok, st)
	}
	for name, tok := range hostileTokens(t, good) {
		if ok, st := count(5, "Authorization", "Bearer "+tok); ok != 0 || st[0] != http.StatusBadRequest {
			t.Errorf("%s token: %d of 5 (%v), want 0 and 400s", name, ok, st)
		}
	}
	for name, h := range map[string][]string{
		"no token":           nil,
		"basic":              {"Authorization", "Basic Zm9vOmJhcg=="},
		"token twice":        {"Authorization", "Bearer " + good.Token(t, "twice", "pro"), "Authorization", "Bearer x"},
		"claims in a header": {"X-Jwt-Sub", "alice", "X-Plan", "pro"},
	} {
		if ok, st := count(3, h...); ok != 0 || st[0] != http.StatusBadRequest {
			t.Errorf("%s: %d of 3 (%v), want 0 and 400s", name, ok, st)
		}
	}
}

// TestJWTUnverifiedCountedElsewhere: with on_missing naming another key,
// tokens that do not verify are all counted under it, never let through
// uncounted and never granted the pro plan they claim.
func TestJWTUnverifiedCountedElsewhere(t *testing.T) {
	good := jwttest.NewKey(t, "k1")
	srv := serve(t, jwtPolicy(t, "global", good))
	ok := 0
	for _, tok := range hostileTokens(t, good) {
		if resp, _ := do(t, "GET", srv.URL+"/api/x", "Authorization", "Bearer "+tok); resp.StatusCode == http.StatusOK {
			ok++
		}
	}
	if ok != 3 {
		t.Fatalf("%d of 8 unverified tokens admitted, want 3 (the base limit, shared)", ok)
	}
}

// TestJWTOverrideListed: a claim override shows in Overrides.
func TestJWTOverrideListed(t *testing.T) {
	p := jwtPolicy(t, "refuse", jwttest.NewKey(t, "k1"))
	l := p.Rules[0].Limits[0]
	if got := l.Overrides()[0].When; got != "claim plan: pro" {
		t.Fatalf("When = %q", got)
	}
	if got := l.Key(); got != "jwt:sub" {
		t.Fatalf("Key = %q", got)
	}
}

// TestJWTInExpressions: jwt holds the claims of a verified token only. A
// forged token claiming pro leaves jwt empty: jwt.plan fails, and the
// rule for everyone but pro users applies to it.
func TestJWTInExpressions(t *testing.T) {
	good := jwttest.NewKey(t, "k1")
	dir := t.TempDir()
	jwttest.WriteJWKS(t, filepath.Join(dir, "jwks.json"), good)
	file := filepath.Join(dir, "policy.yaml")
	os.WriteFile(file, []byte(`
jwt: {jwks_file: jwks.json, issuer: "https://issuer.example", audience: api}
rules:
  - name: not-pro
    match: {expr: 'jwt.plan != "pro"'}
    limits:
      - {name: per-ip, key: ip, algorithm: fixed_window, rate: 1/h}
  - name: by-org
    match: {path: /org/}
    limits:
      - {name: per-org, key: "expr:'jwt.org'", on_missing: refuse, algorithm: fixed_window, rate: 5/h}
`), 0o600)
	p, err := policy.Load(file, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, p)
	get := func(path, token string) int {
		resp, _ := do(t, "GET", srv.URL+path, "Authorization", "Bearer "+token)
		return resp.StatusCode
	}
	pro := good.Token(t, "p", "pro")
	for range 3 {
		if st := get("/x", pro); st != http.StatusOK {
			t.Fatalf("a verified pro token: %d", st)
		}
	}
	forged := jwttest.NewKey(t, "k1").Token(t, "m", "pro")
	if a, b := get("/x", forged), get("/x", forged); a != http.StatusOK || b != http.StatusTooManyRequests {
		t.Fatalf("a forged pro token: %d then %d, want 200 then 429", a, b)
	}
	if st := get("/org/x", pro); st != http.StatusBadRequest {
		t.Fatalf("no org claim: %d, want 400", st)
	}
}
