package policy_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/policy"
)

// exprPolicy: the v2 rule, a limit keyed by an expression, and one
// whose cost is an expression.
const exprPolicy = `
rules:
  - name: v2
    match: {path: /v2only/, expr: 'request.headers["x-api-version"] == "2"'}
    limits:
      - {name: v2-ip, key: ip, algorithm: fixed_window, rate: 2/h}
  - name: tenant
    match: {path: /tenant/}
    limits:
      - name: per-tenant
        key: "expr:'request.headers[\"x-tenant\"].lowerAscii()'"
        on_missing: refuse
        algorithm: fixed_window
        rate: 2/h
  - name: weighted
    match: {path: /batch/}
    limits:
      - name: batch
        key: global
        cost: "expr:'request.method == \"POST\" ? 3 : 1'"
        algorithm: fixed_window
        rate: 6/h
  - name: slow
    match: {path: /slow/, expr: '[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25].all(a, [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25].all(b, [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25].all(c, a + b + c > 0)))'}
    limits:
      - {name: slow-ip, key: ip, algorithm: fixed_window, rate: 1/h}
`

func exprServer(t *testing.T) func(n int, method, path string, headers ...string) (ok int, statuses []int) {
	p, err := policy.Parse("expr.yaml", []byte(exprPolicy), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, p)
	return func(n int, method, path string, headers ...string) (ok int, statuses []int) {
		for range n {
			r, _ := http.NewRequest(method, srv.URL+path, nil)
			for i := 0; i+1 < len(headers); i += 2 {
				r.Header.Add(headers[i], headers[i+1])
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
}

// TestExprMatch: the expression rule limits only version-2 requests; a
// request that makes the expression fail (no header, the header sent
// twice) is counted by the rule, never let through because of what it
// left out; an expression that runs past the cost limit applies its rule.
func TestExprMatch(t *testing.T) {
	send := exprServer(t)
	if ok, st := send(4, "GET", "/v2only/x", "X-Api-Version", "1"); ok != 4 {
		t.Errorf("version 1: %d of 4 (%v), want 4", ok, st)
	}
	if ok, st := send(4, "GET", "/v2only/x", "X-Api-Version", "2"); ok != 2 || st[2] != http.StatusTooManyRequests {
		t.Errorf("version 2: %d of 4 (%v), want 2", ok, st)
	}
	for name, h := range map[string][]string{
		"no header":  nil,
		"sent twice": {"X-Api-Version", "1", "X-Api-Version", "2"},
	} {
		if ok, st := send(2, "GET", "/v2only/x", h...); ok != 0 {
			t.Errorf("%s: %d of 2 (%v), want 0: counted by the exhausted v2 rule", name, ok, st)
		}
	}
	if ok, st := send(3, "GET", "/slow/x"); ok != 1 {
		t.Errorf("an expression past the cost limit: %d of 3 (%v), want 1 (the rule applies)", ok, st)
	}
}

// TestExprKeyAndCost: a key part expression keys by what it computes (one
// tenant however spelled) and a request it fails for is a missing part
// (on_missing: refuse, 400); a cost expression charges what it gives.
func TestExprKeyAndCost(t *testing.T) {
	send := exprServer(t)
	ok := 0
	for _, tenant := range []string{"acme", "ACME", "Acme"} {
		n, _ := send(1, "GET", "/tenant/x", "X-Tenant", tenant)
		ok += n
	}
	if ok != 2 {
		t.Errorf("acme spelled three ways: %d of 3, want 2", ok)
	}
	for name, h := range map[string][]string{"no tenant": nil, "tenant twice": {"X-Tenant", "a", "X-Tenant", "b"}} {
		if ok, st := send(2, "GET", "/tenant/x", h...); ok != 0 || st[0] != http.StatusBadRequest {
			t.Errorf("%s: %d of 2 (%v), want 400s", name, ok, st)
		}
	}
	if ok, st := send(3, "POST", "/batch/x"); ok != 2 {
		t.Errorf("POST at cost 3 under 6/h: %d of 3 (%v), want 2", ok, st)
	}
}

// TestExprLoadErrors: sluice check names the file, line, rule and the
// expression's error.
func TestExprLoadErrors(t *testing.T) {
	_, err := policy.Parse("bad.yaml", []byte(`
rules:
  - name: v2
    match: {expr: 'request.headers["x"] =='}
    limits:
      - {name: a, key: "expr:'request.heders[\"x\"]'", algorithm: fixed_window, rate: 2/h}
      - {name: b, key: ip, cost: "expr:'\"three\"'", algorithm: fixed_window, rate: 2/h}
      - {name: c, key: "expr:'[1]'", algorithm: fixed_window, rate: 2/h}
`), policy.Options{})
	for _, want := range []string{
		`bad.yaml:4: rule "v2": match.expr: expression "request.headers[\"x\"] ==": ERROR: <input>:1:24: Syntax error`,
		`bad.yaml:6: rule "v2": limit "a": key: expression "request.heders[\"x\"]": request has no field heders`,
		`bad.yaml:7: rule "v2": limit "b": cost: expression "\"three\"": gives string, want int`,
		`bad.yaml:8: rule "v2": limit "c": key: expression "[1]": gives list(int), want a string, number or bool`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\ndoes not say %s", err, want)
		}
	}
}
