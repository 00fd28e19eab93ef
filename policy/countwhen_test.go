package policy_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

const loginPolicy = `
rules:
  - name: login
    match: {methods: [POST], path: /login}
    limits:
      - {name: login-failures, key: ip, algorithm: fixed_window, rate: %d/h, count_when: {status: [401, "500-599"]}}
`

// loginServer serves /login behind the policy's limits: 401 unless the
// request's X-Password is "right"; the handler waits for gate, when set.
func loginServer(t *testing.T, store sluice.Store, n int, gate func()) *httptest.Server {
	t.Helper()
	p, err := policy.Parse("login.yaml", []byte(strings.Replace(loginPolicy, "%d", string(rune('0'+n)), 1)), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(sluice.New(store), httplimit.Config{Source: p, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gate != nil {
			gate()
		}
		if r.Header.Get("X-Password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	})))
	t.Cleanup(srv.Close)
	return srv
}

func login(t *testing.T, srv *httptest.Server, password string) int {
	t.Helper()
	resp, _ := do(t, "POST", srv.URL+"/login", "X-Password", password)
	return resp.StatusCode
}

// TestCountWhen: with count_when, successful logins never touch the
// limit, failed ones exhaust it, and then every login of the key is
// refused, a right password too.
func TestCountWhen(t *testing.T) {
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			srv := loginServer(t, store, 3, nil)
			for i := range 10 {
				if s := login(t, srv, "right"); s != 200 {
					t.Fatalf("successful login %d: %d, want 200 (successes are not counted)", i+1, s)
				}
			}
			var got []int
			for range 4 {
				got = append(got, login(t, srv, "wrong"))
			}
			got = append(got, login(t, srv, "right"))
			if want := []int{401, 401, 401, 429, 429}; !equalInts(got, want) {
				t.Errorf("three failures, a fourth, then the right password: %v, want %v", got, want)
			}
		})
	}
}

// TestCountWhenConcurrent: with one failure left, of 16 concurrent failing
// logins exactly one reaches the handler; the others are refused while
// its reservation stands. The bound: failures counted never exceed the
// limit, however many are in flight, because each request in flight holds
// its unit until its response settles it. When the one in flight
// succeeds instead, its unit is given back.
func TestCountWhenConcurrent(t *testing.T) {
	for _, password := range []string{"wrong", "right"} {
		for name, store := range stores(t) { // fresh ones for each password
			t.Run(name+"/"+password, func(t *testing.T) {
				release := make(chan struct{})
				var inHandler atomic.Int64
				srv := loginServer(t, store, 1, func() { inHandler.Add(1); <-release })
				var refused atomic.Int64
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						if login(t, srv, password) == 429 {
							refused.Add(1)
						}
					})
				}
				deadline := time.Now().Add(20 * time.Second)
				for inHandler.Load()+refused.Load() < 16 && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if in := inHandler.Load(); in != 1 || refused.Load() != 15 {
					t.Errorf("%d in the handler, %d refused of 16 concurrent: want 1 and 15", in, refused.Load())
				}
				close(release)
				wg.Wait()
				want := 429 // the failure is counted: the limit of 1 is spent
				if password == "right" {
					want = 401 // refunded: the next failing login is admitted
				}
				if s := login(t, srv, "wrong"); s != want {
					t.Errorf("after the one in flight answered, a failing login got %d, want %d", s, want)
				}
			})
		}
	}
}

func equalInts(a, b []int) bool {
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

// TestCountWhenInvalid: count_when's mistakes are errors that name the
// field.
func TestCountWhenInvalid(t *testing.T) {
	for _, tc := range []struct{ limit, want string }{
		{`count_when: {status: [99]}`, `count_when.status: "99": want a status code from 100 to 599`},
		{`count_when: {status: ["500-400"]}`, `"500-400": want a status code`},
		{`count_when: {status: [abc]}`, `"abc": want a status code`},
		{`count_when: {status: []}`, `count_when.status: want a list of at least one`},
		{`count_when: {}`, `count_when: missing status`},
		{`count_when: {status: [401], code: [16]}`, `unknown field "count_when.code"`},
	} {
		_, err := policy.Parse("p.yaml", []byte(`
rules:
  - name: login
    limits:
      - {name: l, key: ip, algorithm: fixed_window, rate: 3/h, `+tc.limit+`}
`), policy.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.limit, err, tc.want)
		}
	}
	_, err := policy.Parse("p.yaml", []byte(`
rules:
  - name: c
    limits:
      - {name: l, key: ip, algorithm: concurrency, limit: 3, count_when: {status: [401]}}
`), policy.Options{})
	if err == nil || !strings.Contains(err.Error(), "in flight") {
		t.Errorf("count_when on a concurrency limit: %v, want an error", err)
	}
}
