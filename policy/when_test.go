package policy_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/redisstore"
)

const relatePolicy = `
trusted_proxies: [127.0.0.1/32]
rules:
  - name: writes
    match: {methods: [POST, PUT, DELETE], path: /api/}
    limits:
      - {name: writes-ip, key: ip, algorithm: fixed_window, rate: 10/h}
      - {name: writes-user, key: "header:X-User", algorithm: fixed_window, rate: 10/h}
  - name: reads
    match: {methods: [GET], path: /api/}
    limits:
      - name: reads-ip
        key: ip
        algorithm: fixed_window
        rate: 2/h
        when: {limit: writes-ip, above: 0.8}
      - name: reads-by-user-writes
        key: ip
        algorithm: fixed_window
        rate: 3/h
        when: {limit: writes-user, above: 0.8}
`

// whenFixture decides requests under a policy on one store.
type whenFixture struct {
	p  *policy.Policy
	dc *decide.Decider
}

func newWhenFixture(t *testing.T, src string, store sluice.Store) *whenFixture {
	t.Helper()
	p, err := policy.Parse("when.yaml", []byte(src), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dc, err := decide.New(sluice.New(store), decide.Config{RelateFor: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return &whenFixture{p, dc}
}

// run plans and decides r, failing the test on a planning error.
func (f *whenFixture) run(t *testing.T, r *http.Request) *decide.Result {
	t.Helper()
	checks, err := f.p.Plan(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	var res decide.Result
	f.dc.Run(context.Background(), checks, &res)
	return &res
}

// admitted counts the admissions of n requests made by mk.
func (f *whenFixture) admitted(t *testing.T, n int, mk func() *http.Request) int {
	t.Helper()
	ok := 0
	for range n {
		if f.run(t, mk()).Proceed() {
			ok++
		}
	}
	return ok
}

func from(method, target, peer string, headers ...string) func() *http.Request {
	return func() *http.Request {
		r := httptest.NewRequest(method, target, nil)
		r.RemoteAddr = peer + ":4000"
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Add(headers[i], headers[i+1])
		}
		return r
	}
}

// TestRelatePolicy: on every store, a client's reads are not limited
// while its writes use 80% or less of their budget (8 of 10), and are
// limited (2 an hour) once they use more; another client's reads are not,
// its writes being idle. A relation whose related key the request lacks
// (no X-User) applies: the reads it limits are checked.
func TestRelatePolicy(t *testing.T) {
	all := stores(t)
	cl, err := redisstore.New(redistest.Cluster(t), redisstore.Config{Prefix: redistest.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	all["cluster"] = cl
	for name, store := range all {
		t.Run(name, func(t *testing.T) {
			f := newWhenFixture(t, relatePolicy, store)
			read := from("GET", "/api/items", "203.0.113.7", "X-User", "ann")
			if res := f.run(t, read()); len(res.Idle) != 2 || len(res.Enforced) != 0 {
				t.Fatalf("writes idle: idle %d, enforced %d; want both reads limits idle", len(res.Idle), len(res.Enforced))
			}
			if ok := f.admitted(t, 8, read); ok != 8 {
				t.Fatalf("writes idle: %d of 8 reads admitted, want all", ok)
			}
			if ok := f.admitted(t, 9, from("POST", "/api/items", "203.0.113.7", "X-User", "bob")); ok != 9 {
				t.Fatalf("%d of 9 writes admitted", ok)
			}
			if ok := f.admitted(t, 4, read); ok != 2 {
				t.Fatalf("writes at 9 of 10: %d of 4 reads admitted, want 2 (reads-ip applies)", ok)
			}
			if ok := f.admitted(t, 4, from("GET", "/api/items", "198.51.100.1", "X-User", "cy")); ok != 4 {
				t.Fatalf("another client: %d of 4 reads admitted, want 4 (its writes idle)", ok)
			}
			// No X-User: writes-user has no key for this request, so
			// reads-by-user-writes applies (3 an hour), though no one's
			// writes are busy.
			res := f.run(t, from("GET", "/api/x", "192.0.2.9")())
			if len(res.Enforced) != 1 || res.Enforced[0].Name != "reads-by-user-writes" {
				t.Fatalf("related key missing: enforced %d, idle %d; want reads-by-user-writes checked", len(res.Enforced), len(res.Idle))
			}
		})
	}
}

const chainPolicy = `
trusted_proxies: [127.0.0.1/32]
entry_header: X-Sluice-Entry
rules:
  - name: checkout
    match: {path: /checkout/}
    limits:
      - {name: checkout-ip, key: ip, algorithm: fixed_window, rate: 100/h}
  - name: orders
    match: {path: /}
    limits:
      - name: orders-from-checkout
        key: global
        algorithm: fixed_window
        rate: 2/h
        when: {entry: checkout}
`

// TestChainPolicy: a limit that counts only the requests that came through
// the checkout entry counts those that matched the checkout rule first,
// those a trusted proxy says came through it (entry_header), and those a
// Go middleware marked (sluice.WithEntry); not the others. A client that
// is not a trusted proxy cannot choose its entry with the header: sent
// to escape the limit, or to be counted elsewhere, it is ignored.
func TestChainPolicy(t *testing.T) {
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			f := newWhenFixture(t, chainPolicy, store)
			if ok := f.admitted(t, 5, from("GET", "/browse", "203.0.113.7")); ok != 5 {
				t.Fatalf("not through checkout: %d of 5 admitted, want 5", ok)
			}
			spoofed := from("GET", "/browse", "203.0.113.7", "X-Sluice-Entry", "checkout")
			if res := f.run(t, spoofed()); len(res.Enforced) != 0 {
				t.Fatalf("entry header from an untrusted peer honoured: %d checks", len(res.Enforced))
			}
			escape := from("GET", "/checkout/pay", "203.0.113.7", "X-Sluice-Entry", "browse")
			if ok := f.admitted(t, 3, escape); ok != 2 {
				t.Fatalf("through checkout, header saying otherwise from a client: %d of 3 admitted, want 2", ok)
			}
			trusted := from("GET", "/browse", "127.0.0.1", "X-Sluice-Entry", "checkout")
			if res := f.run(t, trusted()); res.Outcome != decide.Refused {
				t.Fatalf("entry header from the trusted proxy: outcome %v, want refused (counted under orders-from-checkout)", res.Outcome)
			}
			marked := httptest.NewRequest("GET", "/browse", nil)
			marked = marked.WithContext(sluice.WithEntry(marked.Context(), "checkout"))
			if res := f.run(t, marked); res.Outcome != decide.Refused {
				t.Fatalf("entry marked by a middleware: outcome %v, want refused", res.Outcome)
			}
		})
	}
}

// TestChainHostileHeader: the entry header from a trusted proxy sent twice
// is the client's error; the policy's entry header is protected (sluice
// serve removes it from requests of other peers).
func TestChainHostileHeader(t *testing.T) {
	p, err := policy.Parse("chain.yaml", []byte(chainPolicy), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := from("GET", "/browse", "127.0.0.1", "X-Sluice-Entry", "checkout", "X-Sluice-Entry", "orders")()
	if _, err := p.Plan(r, nil); err == nil {
		t.Fatal("entry header sent twice: planned")
	} else if _, ok := decide.AsClientError(err); !ok {
		t.Fatalf("entry header sent twice: %v, want a client error", err)
	}
	if got := p.ProtectedHeaders(); len(got) != 1 || got[0] != "X-Sluice-Entry" {
		t.Fatalf("protected headers %q, want [X-Sluice-Entry]", got)
	}
}

// TestChainWarnings: an entry that is a plain name but no rule's, in a
// policy without entry_header, loads with a warning (only a Go middleware
// can give it); entry_header without trusted_proxies warns too.
func TestChainWarnings(t *testing.T) {
	p, err := policy.Parse("w.yaml", []byte(`
entry_header: X-Sluice-Entry
rules:
  - name: api
    limits:
      - {name: a, key: ip, algorithm: fixed_window, rate: 1/s, when: {entry: mobile-app}}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(p.Warnings, "\n"); !strings.Contains(w, "entry_header: honoured only for requests through trusted_proxies") {
		t.Fatalf("warnings %q", w)
	}
	p, err = policy.Parse("w.yaml", []byte(`
rules:
  - name: api
    limits:
      - {name: a, key: ip, algorithm: fixed_window, rate: 1/s, when: {entry: mobile-app}}
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(p.Warnings, "\n"); !strings.Contains(w, `w.yaml:5: rule "api": limit "a": when.entry: "mobile-app" names no rule`) {
		t.Fatalf("warnings %q", w)
	}
}

// TestRelateWarnsOfClientKeys: a relation to a limit keyed by a header
// this limit's key lacks warns (a client chooses which counter is looked
// at); one that shares the header does not.
func TestRelateWarnsOfClientKeys(t *testing.T) {
	p, err := policy.Parse("when.yaml", []byte(relatePolicy), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(p.Warnings, "\n"); len(p.Warnings) != 1 || !strings.Contains(w, `limit "reads-by-user-writes": when.limit: "writes-user" is keyed by header:X-User, which the client sends`) {
		t.Fatalf("warnings %q", w)
	}
	shared := strings.ReplaceAll(relatePolicy, "        key: ip\n        algorithm: fixed_window\n        rate: 3/h", "        key: [ip, \"header:X-User\"]\n        algorithm: fixed_window\n        rate: 3/h")
	if p, err = policy.Parse("when.yaml", []byte(shared), policy.Options{}); err != nil || len(p.Warnings) != 0 {
		t.Fatalf("sharing the header: %v, warnings %q", err, p.Warnings)
	}
}

// TestWhenSnapshot: the snapshot logged at load says when each limit
// applies.
func TestWhenSnapshot(t *testing.T) {
	p, err := policy.Parse("when.yaml", []byte(relatePolicy), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "reads-ip by ip fixed_window(2 per 1h) when writes-ip is above 80%"; !strings.Contains(p.Snapshot(), want) {
		t.Errorf("snapshot %s\nwant it to say %s", p.Snapshot(), want)
	}
	p, err = policy.Parse("chain.yaml", []byte(chainPolicy), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "orders-from-checkout by global fixed_window(2 per 1h) when through checkout"; !strings.Contains(p.Snapshot(), want) {
		t.Errorf("snapshot %s\nwant it to say %s", p.Snapshot(), want)
	}
}
