package policy_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/policy"
)

// keyPolicy limits by every key part a client controls, each alone and all
// together.
func keyPolicy(t testing.TB) *policy.Policy {
	p, err := policy.Parse("keys.yaml", []byte(`
rules:
  - name: all
    match: {path: /}
    limits:
      - {name: by-header, key: header:X-User, algorithm: gcra, rate: 10/s}
      - {name: by-query, key: query:token, algorithm: gcra, rate: 10/s}
      - {name: by-cookie, key: cookie:sid, algorithm: gcra, rate: 10/s}
      - {name: by-host, key: host, algorithm: gcra, rate: 10/s}
      - {name: by-all, key: [header:X-User, query:token, cookie:sid, host, method], algorithm: gcra, rate: 10/s}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// clientRequest builds a request carrying the client-controlled values.
func clientRequest(user, token, sid, host string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.Host = host
	r.Header.Set("X-User", user)
	r.URL.RawQuery = url.Values{"token": {token}}.Encode()
	r.Header.Set("Cookie", (&http.Cookie{Name: "sid", Value: sid, Quoted: false}).String())
	return r
}

// TestLongKeyValues: values of any length from headers, queries, cookies
// and the host are planned under keys of bounded length (long values by
// their digest, through decide.KeyValue), never refused with an error.
func TestLongKeyValues(t *testing.T) {
	p := keyPolicy(t)
	long := strings.Repeat("v", 64<<10)
	r := clientRequest(long, long, long, long)
	planned, err := p.Plan(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(planned) != 5 {
		t.Fatalf("planned %d limits, want 5", len(planned))
	}
	for _, pl := range planned {
		if len(pl.Key) > 5*(decide.MaxKeyValue+8)+32 {
			t.Errorf("%s: key of %d bytes", pl.Name, len(pl.Key))
		}
		if !strings.Contains(pl.Key, decide.DigestPrefix) {
			t.Errorf("%s: key %q holds no digest", pl.Name, pl.Key)
		}
	}
	// One byte of difference at the end of a long value is another key.
	other, _ := p.Plan(clientRequest(long[:len(long)-1]+"w", long, long, long), nil)
	if other[0].Key == planned[0].Key {
		t.Fatal("long values differing in their last byte share a key")
	}
}

// FuzzPlanKeys: two requests whose client-controlled values differ never
// share a key under a limit, and every key is bounded in length, whatever
// bytes the values hold (the length prefixes and the digest of long values
// keep them apart). Hosts are compared as rules and keys see them: in
// normal form, without the port; a host Normalize refuses is a client error.
func FuzzPlanKeys(f *testing.F) {
	p := keyPolicy(f)
	long := strings.Repeat("x", decide.MaxKeyValue+1)
	f.Add("ann", "t", "s", "h", "ann", "t", "s", "h2")
	f.Add("a:b", "c", "s", "h", "a", "b:c", "s", "h")
	f.Add(long, "t", "s", "h", "sha256:"+strings.Repeat("0", 64), "t", "s", "h")
	f.Add("1:a", "", "", "", "1", "a", "", "")
	f.Fuzz(func(t *testing.T, u1, t1, s1, h1, u2, t2, s2, h2 string) {
		r1, r2 := clientRequest(u1, t1, s1, h1), clientRequest(u2, t2, s2, h2)
		v1, v2 := values(r1), values(r2)
		p1, err1 := p.Plan(r1, nil)
		p2, err2 := p.Plan(r2, nil)
		for _, err := range []error{err1, err2} {
			if ce, ok := decide.AsClientError(err); ok && ce.Field == "host" {
				return // refused with 400: no key
			}
		}
		if err1 != nil || err2 != nil {
			t.Fatalf("plan: %v, %v", err1, err2)
		}
		k1, k2 := keysByName(p1), keysByName(p2)
		for i, name := range []string{"by-header", "by-query", "by-cookie", "by-host"} {
			a, okA := k1[name]
			b, okB := k2[name]
			if okA && okB && (a == b) != (v1[i] == v2[i]) {
				t.Fatalf("%s: values %q and %q, keys %q and %q", name, v1[i], v2[i], a, b)
			}
		}
		if a, b := k1["by-all"], k2["by-all"]; a != "" && a == b && v1 != v2 {
			t.Fatalf("by-all: values %q and %q share the key %q", v1, v2, a)
		}
		for _, k := range []map[string]string{k1, k2} {
			for name, key := range k {
				if len(key) > 5*(decide.MaxKeyValue+8)+32 {
					t.Fatalf("%s: key of %d bytes", name, len(key))
				}
			}
		}
	})
}

// values returns the values the policy reads from r, as it reads them.
func values(r *http.Request) [4]string {
	var sid string
	if c, err := r.Cookie("sid"); err == nil {
		sid = c.Value
	}
	host, _ := policy.NormalizeHost(r.Host)
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		host = host[:i]
	}
	return [4]string{r.Header.Get("X-User"), r.URL.Query().Get("token"), sid, host}
}

func keysByName(ps []decide.Check) map[string]string {
	m := map[string]string{}
	for _, p := range ps {
		m[p.Name] = p.Key
	}
	return m
}

// FuzzParseRate: no input panics; an accepted rate is positive-period and
// prints back as a rate that parses to the same value.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"100/s", "10/m", "5/h", "1000/d", "3/250ms", "100/10s", " 7 / 2d ", "-1/s", "1/0s", "9223372036854775807/ns", "1/", "/s", "1/366d", "1/367d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := policy.ParseRate(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if r.Period <= 0 || r.Count < 0 {
			return // accepted by the parser, refused by sluice.Limit.Validate
		}
		back, err := policy.ParseRate(r.String())
		if err != nil || back != r {
			t.Fatalf("%q parsed as %+v, printed %q, read back %+v (%v)", s, r, r.String(), back, err)
		}
	})
}

// FuzzParseDuration: no input panics, days stay within 0 to 366, and an
// accepted duration agrees with time.ParseDuration where that accepts it.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"1m30s", "250ms", "1d", "7d", "366d", "367d", "-1d", "d", "1.5d", "9223372036854775807d", " 2h ", "1e3s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := policy.ParseDuration(s)
		if err != nil {
			return
		}
		if want, gerr := time.ParseDuration(strings.TrimSpace(s)); gerr == nil && want != d {
			t.Fatalf("%q: %v, time.ParseDuration says %v", s, d, want)
		}
		if strings.HasSuffix(strings.TrimSpace(s), "d") && (d < 0 || d > 366*24*time.Hour) {
			t.Fatalf("%q: %v days out of range", s, d)
		}
	})
}

// FuzzCostHeader: a cost header of any content either sets a cost from 0 to
// the limit's capacity or is refused with an error, never a panic or a cost
// outside that range.
func FuzzCostHeader(f *testing.F) {
	p, err := policy.Parse("cost.yaml", []byte(`
rules:
  - name: r
    match: {path: /}
    limits:
      - {name: l, key: global, algorithm: token_bucket, rate: 10/s, burst: 50, cost: header:X-Cost}
`), policy.Options{})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"1", "0", "50", "51", "-1", "+5", "9223372036854775808", "1e3", " 7", "0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["X-Cost"] = []string{v}
		planned, err := p.Plan(r, nil)
		if err != nil {
			return
		}
		if len(planned) != 1 || planned[0].Cost < 0 || planned[0].Cost > 50 {
			t.Fatalf("cost header %q planned %+v", v, planned)
		}
	})
}
