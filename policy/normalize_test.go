package policy_test

import (
	"bufio"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/policy"
)

// normalPolicy has a path rule and a host rule, each with its own limit.
func normalPolicy(t testing.TB) *policy.Policy {
	p, err := policy.Parse("normal.yaml", []byte(`
rules:
  - name: api
    match: {path: /api/}
    limits:
      - {name: api, key: global, algorithm: gcra, rate: 10/s}
  - name: beta
    match: {host: Beta.Example.com.}
    limits:
      - {name: beta, key: host, algorithm: gcra, rate: 10/s}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// readRequest parses a request as net/http's server does, from the bytes
// of its request line and Host header. nil: the server refuses it itself
// (400) before any handler runs.
func readRequest(method, target, host string) *http.Request {
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")))
	if err != nil {
		return nil
	}
	return r
}

// TestNormalizeHostile: requests spelled as a client would to get around
// the /api/ and beta.example.com rules are either matched, under the path
// and host Normalize gives (which the gateway forwards), or refused with a
// client error (400), never let past a rule that should count them.
func TestNormalizeHostile(t *testing.T) {
	p := normalPolicy(t)
	const refused = "400"
	for _, tc := range []struct {
		target, host string
		path         string   // the normalised path, or refused
		limits       []string // the limits planned
	}{
		{"/api/x", "example.com", "/api/x", []string{"api"}},
		{"/%61pi/x", "example.com", "/api/x", []string{"api"}},
		{"/%61%70%69/%78", "example.com", "/api/x", []string{"api"}},
		{"/x/../api/x", "example.com", "/api/x", []string{"api"}},
		{"/x/%2e%2E/api/x", "example.com", "/api/x", []string{"api"}},
		{"/x/.%2e/api/x", "example.com", "/api/x", []string{"api"}},
		{"/../../api/x", "example.com", "/api/x", []string{"api"}},
		{"//api//x", "example.com", "/api/x", []string{"api"}},
		{"/./api/./x", "example.com", "/api/x", []string{"api"}},
		{"/api/x/..", "example.com", "/api/", []string{"api"}},
		{"/api/x/%2e", "example.com", "/api/x/", []string{"api"}},
		{"/api", "example.com", "/api", []string{"api"}}, // ServeMux would redirect it to /api/: still counted
		{"/api/caf%c3%a9", "example.com", "/api/caf%C3%A9", []string{"api"}},
		{"/api/a%20b", "example.com", "/api/a%20b", []string{"api"}},
		{"/api/a%3Fb%23c", "example.com", "/api/a%3Fb%23c", []string{"api"}},
		{"/api/a%253Bb", "example.com", "/api/a%253Bb", []string{"api"}},
		{"/api/{x}|^", "example.com", "/api/%7Bx%7D%7C%5E", []string{"api"}},
		{"/API/x", "example.com", "/API/x", []string{"api"}}, // matched whatever its case, forwarded as sent
		{"/Api/%61%41", "example.com", "/Api/aA", []string{"api"}},
		{"http://example.com/%61pi/x", "other.example", "/api/x", []string{"api"}},
		{"/api%2Fx", "example.com", refused, nil},
		{"/api%2fx/", "example.com", refused, nil},
		{"/api%5Cx", "example.com", refused, nil},
		{`/api\x`, "example.com", refused, nil},
		{"/x%2F..%2Fapi/x", "example.com", refused, nil},
		{"/api;x/x", "example.com", refused, nil},
		{"/api/x;jsessionid=1", "example.com", refused, nil},
		{"/api/%00", "example.com", refused, nil},
		{"/api/%0a", "example.com", refused, nil},
		{"/api/%7f", "example.com", refused, nil},
		{"/api/%", "example.com", refused, nil},
		{"/api/%g0", "example.com", refused, nil},
		{"*", "example.com", refused, nil},
		{"example.com:443", "example.com", refused, nil},

		{"/", "beta.example.com", "/", []string{"beta"}},
		{"/", "BETA.example.COM", "/", []string{"beta"}},
		{"/", "beta.example.com.", "/", []string{"beta"}},
		{"/", "Beta.Example.Com.:8080", "/", []string{"beta"}},
		{"/api/x", "beta.example.com", "/api/x", []string{"api", "beta"}},
		{"http://BETA.example.com./x", "example.com", "/x", []string{"beta"}},
		{"HTTP://beta.example.com/x", "example.com", "/x", []string{"beta"}},
		{"ftp://beta.example.com/x", "example.com", refused, nil},
		{"/", "beta.example.com..", refused, nil},
		{"/", "beta..example.com", refused, nil},
		{"/", ".beta.example.com", refused, nil},
		{"/", "beta.example.com:http", refused, nil},
		{"/", "beta.example.com%2e", refused, nil},
		{"/", "beta.example.com:", refused, nil},
	} {
		t.Run(tc.host+tc.target, func(t *testing.T) {
			r := readRequest("GET", tc.target, tc.host)
			if tc.target == "example.com:443" {
				r = readRequest("CONNECT", tc.target, tc.host)
			}
			if r == nil {
				if tc.path != refused {
					t.Fatalf("net/http refuses it; want path %q", tc.path)
				}
				return // answered 400 by net/http
			}
			n, nerr := policy.Normalize(r)
			planned, err := p.Plan(r, nil)
			if tc.path == refused {
				ce, ok := decide.AsClientError(err)
				if !ok || ce.HTTPStatus() != 400 || len(planned) != 0 {
					t.Fatalf("Plan = %v, %v; want a client error (400)", names(planned), err)
				}
				if _, ok := decide.AsClientError(nerr); !ok {
					t.Errorf("Plan refused it but Normalize says %v", nerr)
				}
				return
			}
			if err != nil || nerr != nil {
				t.Fatalf("Plan: %v, Normalize: %v", err, nerr)
			}
			if got := n.URL.EscapedPath(); got != tc.path || n.URL.RequestURI() != tc.path || n.RequestURI != tc.path {
				t.Errorf("normalised path %q (RequestURI %q, %q), want %q", got, n.URL.RequestURI(), n.RequestURI, tc.path)
			}
			if got := names(planned); !slices.Equal(got, tc.limits) {
				t.Errorf("planned %v, want %v", got, tc.limits)
			}
			if again, err := policy.Normalize(n); err != nil || again != n {
				t.Errorf("normalising the normal request again: %v, same request: %v", err, again == n)
			}
		})
	}
}

func names(cs []decide.Check) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// TestHostKey: one host is one key, however it is spelled, with or without
// a port.
func TestHostKey(t *testing.T) {
	p := normalPolicy(t)
	keys := map[string]bool{}
	for _, host := range []string{"beta.example.com", "BETA.example.com", "beta.example.com.", "beta.example.com:8080", "Beta.Example.Com.:1"} {
		planned, err := p.Plan(readRequest("GET", "/", host), nil)
		if err != nil || len(planned) != 1 {
			t.Fatalf("%s: %v, %v", host, names(planned), err)
		}
		keys[planned[0].Key] = true
	}
	if len(keys) != 1 {
		t.Errorf("keys %v: want one", keys)
	}
}

// TestPathCase: rules match paths whatever their ASCII case, and their
// patterns likewise (but wildcard names); a route key is the pattern, one
// key whatever the case of the path.
func TestPathCase(t *testing.T) {
	p, err := policy.Parse("case.yaml", []byte(`
rules:
  - name: reports
    match: {path: "/Reports/{ID}"}
    limits:
      - {name: reports, key: route, algorithm: gcra, rate: 10/s}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, target := range []string{"/reports/7", "/REPORTS/7", "/Reports/AbC", "/rePorts/x", "/REPORTS/%C3%89T%C3%89"} {
		planned, err := p.Plan(readRequest("GET", target, "example.com"), nil)
		if err != nil || len(planned) != 1 {
			t.Fatalf("%s: %v, %v", target, names(planned), err)
		}
		keys[planned[0].Key] = true
	}
	if len(keys) != 1 {
		t.Errorf("route keys %v: want one", keys)
	}
	if planned, _ := p.Plan(readRequest("GET", "/report/7", "example.com"), nil); len(planned) != 0 {
		t.Errorf("/report/7 planned %v", names(planned))
	}
}

// TestNormalizeLeavesNormalRequests: a request already in normal form is
// returned as it is, without a copy.
func TestNormalizeLeavesNormalRequests(t *testing.T) {
	for _, target := range []string{"/", "/api/x", "/api/x/", "/a%20b/c%C3%A9?q=%2F..", "/a:b@c!$&'()*+,=~"} {
		r := readRequest("GET", target, "example.com:8080")
		if n, err := policy.Normalize(r); err != nil || n != r {
			t.Errorf("%s: %v, copied: %v", target, err, n != r)
		}
	}
}

// TestPatternHosts: a rule's host is normalised like a request's; one that
// could never match (a port, an empty label) and a path Normalize refuses
// are errors at load.
func TestPatternHosts(t *testing.T) {
	for match, want := range map[string]string{
		"{host: a.example:8080}": "rules ignore the port",
		"{host: a..example}":     "empty label",
		"{path: /api;v1/}":       "never matches",
		"{path: /a%2Fb}":         "never matches",
	} {
		_, err := policy.Parse("p.yaml", []byte("rules:\n  - name: r\n    match: "+match+"\n    limits:\n      - {name: l, key: global, algorithm: gcra, rate: 1/s}\n"), policy.Options{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", match, err, want)
		}
	}
}

// FuzzNormalizePath: no input panics; a path NormalizePath accepts is
// normal (normalising it again changes nothing), decodes without error
// to a path holding no control byte, no encoded slash and no ";", and is
// one net/http's ServeMux serves without redirecting to a cleaner path.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/", "/a/../b", "//x//", "/%2e%2E/", "/a%2Fb", "/a;b", "/%zz", "/é", "/a/./b/.", "/%41%7e%7E"} {
		f.Add(s)
	}
	mux := http.NewServeMux()
	served := &servedHandler{}
	mux.Handle("/", served)
	f.Fuzz(func(t *testing.T, p string) {
		n, err := policy.NormalizePath(p)
		if err != nil {
			if _, ok := decide.AsClientError(err); !ok {
				t.Fatalf("%q: %v is not a client error", p, err)
			}
			return
		}
		if again, err := policy.NormalizePath(n); err != nil || again != n {
			t.Fatalf("%q → %q → %q, %v", p, n, again, err)
		}
		dec, err := url.PathUnescape(n)
		if err != nil || strings.ContainsAny(dec, ";\\\x00\x7f") || strings.Count(dec, "/") != strings.Count(n, "/") {
			t.Fatalf("%q → %q decodes to %q, %v", p, n, dec, err)
		}
		r := &http.Request{Method: "GET", URL: &url.URL{Path: dec, RawPath: n}, Host: "h"}
		if h, _ := mux.Handler(r); h != http.Handler(served) {
			t.Fatalf("%q → %q: ServeMux redirects it", p, n)
		}
	})
}

type servedHandler struct{}

func (*servedHandler) ServeHTTP(http.ResponseWriter, *http.Request) {}

// BenchmarkNormalize: a request already in normal form costs a scan of its
// host and path and no allocation; another is copied once.
func BenchmarkNormalize(b *testing.B) {
	for _, target := range []string{"/api/orders/12345/items?x=1", "/x/../%61pi//orders/12345/items?x=1"} {
		r := readRequest("GET", target, "Shop.Example.com.:8080")
		if target[1] == 'a' {
			r = readRequest("GET", target, "shop.example.com:8080")
		}
		b.Run(target, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := policy.Normalize(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
