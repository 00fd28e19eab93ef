package policy_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/policy"
)

const banPolicy = `
trusted_proxies: [127.0.0.1/32]
rules:
  - name: login
    match: {methods: [POST], path: /login}
    limits:
      - {name: login-failures, key: ip, algorithm: fixed_window, rate: 3/2s, count_when: {status: [401]}, ban: 30s}
`

// banFixture decides logins under banPolicy on a memory store, on the
// fake clock of a synctest bubble.
type banFixture struct {
	p  *policy.Policy
	dc *decide.Decider
}

func newBanFixture(t *testing.T) *banFixture {
	p, err := policy.Parse("ban.yaml", []byte(banPolicy), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	dc, err := decide.New(sluice.New(store), decide.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return &banFixture{p, dc}
}

// login decides a login from the client at xff (through the trusted proxy
// 127.0.0.1) and settles it with status when admitted. It returns 429
// with the Retry-After when refused.
func (f *banFixture) login(t *testing.T, xff string, status int) (int, time.Duration) {
	t.Helper()
	r := httptest.NewRequest("POST", "/login", nil)
	r.RemoteAddr = "127.0.0.1:5000"
	r.Header.Set("X-Forwarded-For", xff)
	checks, err := f.p.Plan(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	var res decide.Result
	f.dc.Run(context.Background(), checks, &res)
	if res.Outcome == decide.Refused {
		return 429, res.Decision.RetryAfter
	}
	if res.Outcome != decide.Admitted {
		t.Fatalf("%s: outcome %v", xff, res.Outcome)
	}
	res.SettleResponse(context.Background(), decide.Response{Status: status, HasStatus: true}, nil)
	return status, 0
}

// TestBan: three failed logins, then the fourth is refused and starts a
// 30s ban: a right password 2.5s later, after the window refilled, is
// still refused, with Retry-After the ban's time left; another address is
// never limited; after the ban the key is limited as before.
func TestBan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newBanFixture(t)
		for i := range 3 {
			if s, _ := f.login(t, "192.0.2.1", 401); s != 401 {
				t.Fatalf("failed login %d: %d, want it through (401)", i+1, s)
			}
		}
		if s, ra := f.login(t, "192.0.2.1", 401); s != 429 || ra != 30*time.Second {
			t.Fatalf("the fourth failed login: %d, Retry-After %v; want 429 for the ban's 30s", s, ra)
		}
		time.Sleep(2500 * time.Millisecond)
		if s, ra := f.login(t, "192.0.2.1", 200); s != 429 || ra != 27500*time.Millisecond {
			t.Errorf("a right password 2.5s later: %d, Retry-After %v; want 429 for the 27.5s the ban has left", s, ra)
		}
		for range 5 {
			if s, _ := f.login(t, "198.51.100.9", 200); s != 200 {
				t.Errorf("another address: %d, want 200", s)
			}
		}
		time.Sleep(27500 * time.Millisecond)
		if s, _ := f.login(t, "192.0.2.1", 200); s != 200 {
			t.Errorf("after the ban: %d, want 200", s)
		}
	})
}

// TestBanNotEvaded: a banned address written another way (IPv4-mapped
// IPv6, with spaces, another address of the same IPv6 /64) is the same
// key, banned too; and the requests a ban refuses do not lengthen it.
func TestBanNotEvaded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newBanFixture(t)
		for _, addr := range []string{"192.0.2.1", "2001:db8::1"} {
			for range 4 {
				f.login(t, addr, 401)
			}
		}
		time.Sleep(10 * time.Second)
		for _, xff := range []string{"::ffff:192.0.2.1", " 192.0.2.1 ", "10.0.0.1, 192.0.2.1", "[::ffff:c000:201]", "2001:db8::ffff", "2001:DB8:0:0::2"} {
			if s, ra := f.login(t, xff, 200); s != 429 || ra != 20*time.Second {
				t.Errorf("X-Forwarded-For %q: %d, Retry-After %v; want refused by the ban, 20s left", xff, s, ra)
			}
		}
		time.Sleep(20 * time.Second)
		if s, _ := f.login(t, "::ffff:192.0.2.1", 200); s != 200 {
			t.Errorf("after the ban, refusals during it did not lengthen it: got %d, want 200", s)
		}
	})
}

// TestBanInvalid: a ban that is not a duration from 1s to 30 days is an
// error naming the field.
func TestBanInvalid(t *testing.T) {
	for _, ban := range []string{"0s", "-1m", "soon", "500ms", "1000h"} {
		_, err := policy.Parse("p.yaml", []byte(`
rules:
  - name: login
    limits:
      - {name: l, key: ip, algorithm: fixed_window, rate: 3/h, ban: `+ban+`}
`), policy.Options{})
		if err == nil || !strings.Contains(err.Error(), `ban: "`+ban+`": want a duration from 1s to`) {
			t.Errorf("ban %s: %v, want an error naming ban", ban, err)
		}
	}
}
