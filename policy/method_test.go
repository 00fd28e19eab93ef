package policy_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/policy"
)

// methodPolicy limits POSTs to /orders/, keyed by method.
func methodPolicy(t testing.TB) *policy.Policy {
	p, err := policy.Parse("method.yaml", []byte(`
rules:
  - name: orders
    match: {methods: [POST], path: /orders/}
    limits:
      - {name: post, key: method, algorithm: gcra, rate: 10/s}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMethodSpellings: a method spelled in another case is the upper-case
// method, for the rules, for the method key and for the request Normalize
// returns (which the gateway forwards); a method that is not a token is a
// client error; one key whatever the spelling.
func TestMethodSpellings(t *testing.T) {
	p := methodPolicy(t)
	keys := map[string]bool{}
	for _, m := range []string{"POST", "post", "Post", "pOsT"} {
		r := httptest.NewRequest(m, "/orders/a", nil)
		planned, err := p.Plan(r, nil)
		if err != nil || !slices.Equal(names(planned), []string{"post"}) {
			t.Fatalf("%s: planned %v, %v; want the POST rule", m, names(planned), err)
		}
		keys[planned[0].Key] = true
		n, err := policy.Normalize(r)
		if err != nil || n.Method != "POST" {
			t.Errorf("%s: Normalize = %v, %v; want POST", m, n.Method, err)
		}
		if r.Method != m {
			t.Errorf("Normalize changed the request it was given: %q", r.Method)
		}
	}
	if len(keys) != 1 {
		t.Errorf("method keys %v: want one", keys)
	}
	for _, m := range []string{"poſt", "PO\x00ST", "PO ST", "POST\r", "PO/ST", "PÖST", "(POST)", "POST\x7f"} {
		r := httptest.NewRequest("POST", "/orders/a", nil)
		r.Method = m // as a handler behind a lenient server may see it
		planned, err := p.Plan(r, nil)
		if ce, ok := decide.AsClientError(err); !ok || ce.HTTPStatus() != 400 || len(planned) != 0 {
			t.Errorf("%q: Plan = %v, %v; want a client error (400)", m, names(planned), err)
		}
	}
	for m, want := range map[string]string{"": "GET", "purge": "PURGE", "M-SEARCH": "M-SEARCH", "get": "GET"} {
		if got, err := policy.NormalizeMethod(m); err != nil || got != want {
			t.Errorf("NormalizeMethod(%q) = %q, %v; want %q", m, got, err, want)
		}
	}
}

// TestMethodOverrides: the headers that make some frameworks serve a POST
// as another method are removed from the request Normalize returns (in
// any case, with "_" for "-"), and the rules match the method sent; the
// caller's request keeps its headers.
func TestMethodOverrides(t *testing.T) {
	p := methodPolicy(t)
	for _, name := range []string{"X-HTTP-Method-Override", "x-http-method-override", "X-HTTP-Method", "X-Method-Override", "X_HTTP_Method_Override", "x_method_override"} {
		r := httptest.NewRequest("POST", "/orders/a", nil)
		r.Header[name] = []string{"GET"}
		r.Header.Set("X-Other", "kept")
		planned, err := p.Plan(r, nil)
		if err != nil || !slices.Equal(names(planned), []string{"post"}) {
			t.Errorf("%s: planned %v, %v; want the POST rule", name, names(planned), err)
		}
		n, err := policy.Normalize(r)
		if err != nil {
			t.Fatal(err)
		}
		if len(n.Header) != 1 || n.Header.Get("X-Other") != "kept" {
			t.Errorf("%s: the normalised request's header is %v; want X-Other alone", name, n.Header)
		}
		if len(r.Header[name]) != 1 {
			t.Errorf("%s: removed from the caller's request", name)
		}
	}
	for _, name := range []string{"X-HTTP-Method-Overrides", "X-Method", "X-HTTP-Methodx"} {
		r := httptest.NewRequest("POST", "/orders/a", nil)
		r.Header.Set(name, "GET")
		if n, err := policy.Normalize(r); err != nil || n != r {
			t.Errorf("%s: not an override, but Normalize copied the request (%v)", name, err)
		}
	}
}

// TestMethodOverrideKey: a key made of a method override header, which
// no rule ever sees, is an error at load.
func TestMethodOverrideKey(t *testing.T) {
	_, err := policy.Parse("override.yaml", []byte(`
rules:
  - name: api
    limits:
      - {name: per-override, key: "header:X-HTTP-Method-Override", algorithm: gcra, rate: 10/s}
`), policy.Options{})
	if err == nil || !strings.Contains(err.Error(), "method override headers are removed from every request") {
		t.Errorf("Parse = %v; want an error naming the method override", err)
	}
}

// FuzzNormalizeMethod: a method is refused (a client error) exactly when
// net/http's server would refuse it, else normalised to its upper-case
// spelling, which is normal already; no non-ASCII byte is ever folded to
// an ASCII letter.
func FuzzNormalizeMethod(f *testing.F) {
	for _, s := range []string{"GET", "post", "Post", "poſt", "PO ST", "M-SEARCH", "purge", "\xff", "K\u212a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, m string) {
		n, err := policy.NormalizeMethod(m)
		_, readErr := http.ReadRequest(bufio.NewReader(strings.NewReader(m + " / HTTP/1.1\r\nHost: h\r\n\r\n")))
		if err != nil {
			if _, ok := decide.AsClientError(err); !ok {
				t.Fatalf("%q: %v is not a client error", m, err)
			}
			if readErr == nil && m != "" && !strings.ContainsAny(m, " \r\n") {
				t.Fatalf("%q: refused, but net/http reads it", m)
			}
			return
		}
		if m != "" && n != strings.Map(func(r rune) rune {
			if 'a' <= r && r <= 'z' {
				return r - 'a' + 'A'
			}
			return r
		}, m) {
			t.Fatalf("%q → %q: not its ASCII upper case", m, n)
		}
		if again, err := policy.NormalizeMethod(n); err != nil || again != n {
			t.Fatalf("%q → %q → %q, %v", m, n, again, err)
		}
	})
}
