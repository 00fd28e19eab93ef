package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/server"
)

// settlePolicy is a budget of tokens per user that reserves 100 per call
// and settles at most 5,000. The window is long (30 days, aligned to the
// epoch), so that no test straddles its boundary.
const settlePolicy = `
rules:
  - name: llm
    match: {path: /v1/}
    limits:
      - name: tokens
        key: header:X-User
        algorithm: fixed_window
        limit: 10000
        window: 30d
        cost: {reserve: 100, response_header: X-Tokens-Used, max: 5000}
`

// startSettleAPI runs a Server with only the decision API and the admin
// listener, on a memory store, under policy, and returns the API's base
// URL; adminURL is the admin listener's.
func startSettleAPI(t *testing.T, policy string, ttl time.Duration) string {
	base, _ := startSettleAdmin(t, policy, ttl)
	return base
}

func startSettleAdmin(t *testing.T, policy string, ttl time.Duration) (base, adminURL string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := server.Defaults()
	cfg.Gateway, cfg.API, cfg.GRPC, cfg.Admin, cfg.Policy = "", "127.0.0.1:0", "", "127.0.0.1:0", path
	cfg.SettleTTL = server.Duration(ttl)
	srv, err := server.New(cfg, server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return "http://" + srv.Addr("api"), "http://" + srv.Addr("admin")
}

// apiCall is what the tests read of an answer.
type apiCall struct {
	status int
	body   string
	check  struct {
		Allowed     bool
		SettleToken string `json:"settle_token"`
		Decisions   []struct {
			Name      string
			Remaining int64
		}
	}
}

func post(t *testing.T, url, body string) apiCall {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := apiCall{status: resp.StatusCode, body: string(b)}
	json.Unmarshal(b, &a.check)
	return a
}

// reserve checks a call of user and returns its settle token.
func reserve(t *testing.T, base, user string) string {
	t.Helper()
	a := post(t, base+"/v1/check", `{"request": {"path": "/v1/chat", "headers": {"X-User": "`+user+`"}}}`)
	if a.status != 200 || !a.check.Allowed || a.check.SettleToken == "" {
		t.Fatalf("check: %d %s", a.status, a.body)
	}
	return a.check.SettleToken
}

// left peeks at what remains of user's budget.
func left(t *testing.T, base, user string) int64 {
	t.Helper()
	a := post(t, base+"/v1/check", `{"request": {"path": "/v1/chat", "headers": {"X-User": "`+user+`"}}, "hits": 0}`)
	if a.status != 200 || len(a.check.Decisions) != 1 {
		t.Fatalf("peek: %d %s", a.status, a.body)
	}
	if a.check.SettleToken != "" {
		t.Errorf("a peek reserved nothing, yet got a settle token")
	}
	return a.check.Decisions[0].Remaining
}

func settle(t *testing.T, base, token, cost string) apiCall {
	t.Helper()
	body := `{"token": "` + token + `"}`
	if cost != "" {
		body = `{"token": "` + token + `", "cost": ` + cost + `}`
	}
	return post(t, base+"/v1/settle", body)
}

// TestAPISettle: a check reserves, a settle charges the actual cost (at
// most the limit's max; absent, the reservation stands).
func TestAPISettle(t *testing.T) {
	base := startSettleAPI(t, settlePolicy, 0)
	for _, tc := range []struct {
		cost    string
		charged int64
	}{{"30", 30}, {"2500", 2500}, {"0", 0}, {"999999", 5000}, {"", 100}} {
		before := left(t, base, "alice")
		token := reserve(t, base, "alice")
		if got := left(t, base, "alice"); got != before-100 {
			t.Fatalf("after the check: %d left, want %d", got, before-100)
		}
		if a := settle(t, base, token, tc.cost); a.status != 200 {
			t.Fatalf("settle %s: %d %s", tc.cost, a.status, a.body)
		}
		if got := left(t, base, "alice"); got != before-tc.charged {
			t.Errorf("settle %s: %d left, want %d", tc.cost, got, before-tc.charged)
		}
	}
}

// TestAPISettleHostile: what a hostile caller would try. A forged,
// altered, expired, replayed or malformed token is a 4xx and refunds
// nothing; a negative cost is a 400; a token refunds at most what it
// reserved, however often it is sent, even all at once.
func TestAPISettleHostile(t *testing.T) {
	base := startSettleAPI(t, settlePolicy, 0)
	other := startSettleAPI(t, settlePolicy, 0) // another process's secret
	foreign := reserve(t, other, "mallory")
	token := reserve(t, base, "mallory")
	spent := left(t, base, "mallory") // 100 reserved
	raw, _ := base64.RawURLEncoding.DecodeString(token)
	altered := func(i int) string {
		b := append([]byte(nil), raw...)
		b[i] ^= 1
		return base64.RawURLEncoding.EncodeToString(b)
	}
	for _, tc := range []struct {
		desc, token, cost string
		status            int
	}{
		{"another server's token", foreign, "0", 403},
		{"a changed reservation byte", altered(len(raw) - 40), "0", 403},
		{"a changed MAC", altered(len(raw) - 1), "0", 403},
		{"a truncated token", token[:len(token)-4], "0", 403},
		{"not base64", "!!!" + token, "0", 400},
		{"too short", "AAAA", "0", 400},
		{"empty", "", "0", 400},
		{"huge", strings.Repeat("A", 60000), "0", 400},
		{"a negative cost", token, "-100", 400},
		{"a fractional cost", token, "1.5", 400},
	} {
		if a := settle(t, base, tc.token, tc.cost); a.status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.desc, a.status, a.body, tc.status)
		}
	}
	if got := left(t, base, "mallory"); got != spent {
		t.Fatalf("after the refused settles: %d left, want %d (nothing refunded)", got, spent)
	}
	// Twenty at once: one settles, the others are replays.
	var wg sync.WaitGroup
	codes := make(chan int, 20)
	for range 20 {
		wg.Go(func() { codes <- settle(t, base, token, "0").status })
	}
	wg.Wait()
	close(codes)
	n := map[int]int{}
	for c := range codes {
		n[c]++
	}
	if n[200] != 1 || n[409] != 19 {
		t.Errorf("twenty settles of one token: %v, want one 200 and nineteen 409", n)
	}
	if got := left(t, base, "mallory"); got != spent+100 {
		t.Errorf("after the settle: %d left, want %d: a token refunds what it reserved, once", got, spent+100)
	}
}

// TestAPISettleExpired: a token past settle_ttl is a 410 and refunds
// nothing.
func TestAPISettleExpired(t *testing.T) {
	base := startSettleAPI(t, settlePolicy, time.Millisecond)
	token := reserve(t, base, "late")
	before := left(t, base, "late")
	time.Sleep(2 * time.Millisecond) // the token's life is over, whatever the load
	if a := settle(t, base, token, "0"); a.status != http.StatusGone {
		t.Errorf("an expired token: %d %s, want 410", a.status, a.body)
	}
	if got := left(t, base, "late"); got != before {
		t.Errorf("%d left, want %d", got, before)
	}
}

// TestAPISettleExplicit: explicit checks reserve their hits and settle up
// to settle_max; without it there is no token; a refused check gets none.
func TestAPISettleExplicit(t *testing.T) {
	base, admin := startSettleAdmin(t, settlePolicy, 0)
	limit := `"limit": {"algorithm": "fixed_window", "limit": 1000, "window": "30d"}`
	check := func(extra string) apiCall {
		return post(t, base+"/v1/check", `{"checks": [{"key": "k", `+limit+`, "hits": 400`+extra+`}]}`)
	}
	if a := check(""); a.status != 200 || a.check.SettleToken != "" {
		t.Fatalf("without settle_max: %d %s", a.status, a.body)
	}
	a := check(`, "settle_max": 600`)
	if a.status != 200 || a.check.SettleToken == "" {
		t.Fatalf("with settle_max: %d %s", a.status, a.body)
	}
	if s := settle(t, base, a.check.SettleToken, "900"); s.status != 200 || !strings.Contains(s.body, `"charged":600,"capped":true`) {
		t.Errorf("a cost above settle_max: %d %s", s.status, s.body)
	}
	if a := check(`, "settle_max": 600`); a.status != 200 || a.check.Allowed || a.check.SettleToken != "" {
		t.Errorf("a refused check (1,000 of 1,000 used): %d %s", a.status, a.body)
	}
	if a := check(`, "settle_max": 300`); a.status != 400 {
		t.Errorf("settle_max below hits: %d %s", a.status, a.body)
	}
	// Explicit checks name themselves: their settles are counted under
	// one label, so that callers cannot create metric series at will.
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `sluice_settles_total{limit="explicit",result="capped",source="api"} 1`; !strings.Contains(string(metrics), want) {
		t.Errorf("/metrics lacks %s", want)
	}
}

// TestSettleTTLValidated: a negative or day-long settle_ttl is a
// configuration error naming the field.
func TestSettleTTLValidated(t *testing.T) {
	for _, ttl := range []time.Duration{-time.Second, 25 * time.Hour} {
		cfg := server.Defaults()
		cfg.SettleTTL = server.Duration(ttl)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "settle_ttl: must be between 0 (the default, 5m) and 24h") {
			t.Errorf("settle_ttl %s: %v", ttl, err)
		}
	}
}

// TestAPISettleHits: a check of several requests at once (hits) reserves
// hits × reserve, and its settle may charge up to hits × max: the batch's
// actual cost is not capped at one request's max (which would refund what
// the batch used).
func TestAPISettleHits(t *testing.T) {
	base := startSettleAPI(t, settlePolicy, 0)
	a := post(t, base+"/v1/check", `{"request": {"path": "/v1/chat", "headers": {"X-User": "batch"}}, "hits": 3}`)
	if a.status != 200 || a.check.SettleToken == "" {
		t.Fatalf("check: %d %s", a.status, a.body)
	}
	if got := left(t, base, "batch"); got != 10000-300 {
		t.Fatalf("after a check of 3: %d left, want 9700", got)
	}
	if s := settle(t, base, a.check.SettleToken, "9000"); s.status != 200 || !strings.Contains(s.body, `"charged":9000`) {
		t.Fatalf("settle 9,000 for 3 (max 5,000 each): %d %s", s.status, s.body)
	}
	if got := left(t, base, "batch"); got != 1000 {
		t.Errorf("%d left, want 1000", got)
	}
}
