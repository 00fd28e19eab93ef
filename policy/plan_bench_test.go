package policy_test

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/jwttest"
	"github.com/sluicehq/sluice/policy"
)

// BenchmarkPlanClaims measures what verified claims and CEL expressions
// add to planning one request (Policy.Plan; no store decision): a rule
// keyed by a header (the base), the same rule matched by an expression,
// keyed by an expression, and keyed by a verified ES256 token's claim.
func BenchmarkPlanClaims(b *testing.B) {
	key := jwttest.NewKey(b, "k1")
	dir := b.TempDir()
	jwttest.WriteJWKS(b, filepath.Join(dir, "jwks.json"), key)
	token := "Bearer " + key.Token(b, "user-1234", "pro")
	jwt := `jwt: {jwks_file: jwks.json, issuer: "https://issuer.example", audience: api}` + "\n"
	for _, bc := range []struct{ name, policy string }{
		{"header", `{name: l, key: "header:X-User"}`},
		{"match-expr", `{name: l, key: "header:X-User"}
    match: {expr: 'request.headers["x-api-version"] == "2"'}`},
		{"key-expr", `{name: l, key: "expr:'request.headers[\"x-user\"].lowerAscii()'"}`},
		{"jwt-claim", `{name: l, key: "jwt:sub"}`},
		{"jwt-claim-and-expr", `{name: l, key: "jwt:sub"}
    match: {expr: 'jwt.plan == "pro" && request.method == "GET"'}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			lim, match, _ := cutMatch(bc.policy)
			src := "rules:\n  - name: r\n    limits:\n      - " + lim[:len(lim)-1] + ", algorithm: fixed_window, rate: 100/s}\n" + match
			if bc.name[:3] == "jwt" {
				src = jwt + src
			}
			file := filepath.Join(dir, bc.name+".yaml")
			os.WriteFile(file, []byte(src), 0o600)
			p, err := policy.Load(file, policy.Options{})
			if err != nil {
				b.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/api/orders", nil)
			r.Header.Set("X-User", "User-1234")
			r.Header.Set("X-Api-Version", "2")
			r.Header.Set("Authorization", token)
			r.Header.Set("Accept", "application/json")
			r.Header.Set("User-Agent", "bench/1.0")
			var dst []decide.Check
			b.ReportAllocs()
			for b.Loop() {
				if dst, err = p.Plan(r, dst[:0]); err != nil || len(dst) != 1 {
					b.Fatal(err, len(dst))
				}
			}
		})
	}
}

// cutMatch splits a benchmark's limit from the match line after it.
func cutMatch(s string) (limit, match string, ok bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i], s[i+1:] + "\n", true
		}
	}
	return s, "", false
}
