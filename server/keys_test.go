package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/server"
)

// startAdmin runs a Server with the decision API and the admin listener,
// both asking for the token "s3cret", on a memory store, under policy: it
// returns their base URLs.
func startAdmin(t *testing.T, policy string) (api, admin string) {
	t.Helper()
	dir := t.TempDir()
	path, tokens := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "tokens")
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokens, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := server.Defaults()
	cfg.Gateway, cfg.API, cfg.GRPC, cfg.Admin, cfg.Policy = "", "127.0.0.1:0", "", "127.0.0.1:0", path
	cfg.Auth.TokensFile = tokens
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

// call sends a request with the token (unless token is "") and returns the
// status and body.
func call(t *testing.T, method, u, token, body string) (int, string) {
	t.Helper()
	r, _ := http.NewRequest(method, u, strings.NewReader(body))
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" && method == "POST" && !strings.HasPrefix(body, "{") {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAdminKeys: an operator inspects a client's exhausted quota and resets
// it on the admin listener, with the admin token; the client is admitted
// again. Without the token, or with a request a hostile caller could send,
// the answer is a 4xx and nothing changes.
func TestAdminKeys(t *testing.T) {
	api, admin := startAdmin(t, `
rules:
  - name: api
    limits:
      - {name: per-user, key: header:X-User, algorithm: fixed_window, limit: 2, window: 1h}
      - {name: per-user-ip, key: [header:X-User, ip], algorithm: token_bucket, rate: 10/h, burst: 10}
`)
	check := func() bool {
		code, body := call(t, "POST", api+"/v1/check", "s3cret", `{"request": {"path": "/", "ip": "203.0.113.7", "headers": {"X-User": "ann"}}}`)
		var a struct{ Allowed bool }
		if err := json.Unmarshal([]byte(body), &a); code != 200 || err != nil {
			t.Fatalf("check: %d %s", code, body)
		}
		return a.Allowed
	}
	for i, want := range []bool{true, true, false} {
		if got := check(); got != want {
			t.Fatalf("check %d: allowed %v, want %v", i, got, want)
		}
	}
	q := url.Values{"rule": {"api"}, "limit": {"per-user"}, "value": {"ann"}}.Encode()
	var st struct {
		Remaining    int64
		Allowed      bool
		RetryAfterMs int64 `json:"retry_after_ms"`
		Reset        bool
		Spec         string
	}
	decode := func(body string) {
		t.Helper()
		st.Remaining, st.Allowed, st.RetryAfterMs, st.Reset = -1, false, 0, false
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
	}
	if code, body := call(t, "GET", admin+"/admin/keys?"+q, "", ""); code != 401 {
		t.Fatalf("without the token: %d %s", code, body)
	}
	code, body := call(t, "GET", admin+"/admin/keys?"+q, "s3cret", "")
	decode(body)
	if code != 200 || st.Remaining != 0 || st.Allowed || st.RetryAfterMs <= 0 || st.Spec != "fixed_window(2 per 1h)" {
		t.Fatalf("inspect: %d %s", code, body)
	}
	if code, body := call(t, "POST", admin+"/admin/keys/reset", "", q); code != 401 || check() {
		t.Fatalf("reset without the token: %d %s, or the client was admitted", code, body)
	}
	code, body = call(t, "POST", admin+"/admin/keys/reset", "s3cret", q)
	decode(body)
	if code != 200 || !st.Reset || st.Remaining != 2 || !st.Allowed {
		t.Fatalf("reset: %d %s", code, body)
	}
	if !check() {
		t.Fatal("refused after the reset")
	}
	// The two-part key: both values, in order.
	q2 := url.Values{"rule": {"api"}, "limit": {"per-user-ip"}, "value": {"ann", "203.0.113.7"}}.Encode()
	if code, body = call(t, "GET", admin+"/admin/keys?"+q2, "s3cret", ""); code != 200 {
		t.Fatalf("two-part key: %d %s", code, body)
	}
	decode(body)
	if st.Remaining != 10-3 { // three checks admitted
		t.Fatalf("two-part key: %s", body)
	}
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"GET", "/admin/keys", "", 400},
		{"GET", "/admin/keys?rule=api&limit=per-user", "", 400},
		{"GET", "/admin/keys?rule=nope&limit=per-user&value=ann", "", 404},
		{"GET", "/admin/keys?rule=api&limit=nope&value=ann", "", 404},
		{"GET", "/admin/keys?rule=api&limit=per-user&value=ann&value=bob", "", 400},
		{"GET", "/admin/keys?rule=api&limit=per-user-ip&value=ann", "", 400},
		{"GET", "/admin/keys?rule=api&limit=per-user&value=", "", 400},
		{"GET", "/admin/keys?rule=api&limit=per-user&value=%zz", "", 400},
		{"GET", "/admin/keys/reset?" + q, "", 405},
		{"POST", "/admin/keys/reset", "rule=api&limit=per-user&value=" + strings.Repeat("x", 20<<10), 400},
		{"POST", "/admin/keys/reset", "rule=api;limit=per-user", 400},
	} {
		if code, body := call(t, tc.method, admin+tc.path, "s3cret", tc.body); code != tc.want {
			t.Errorf("%s %.60s %.40s: %d %s, want %d", tc.method, tc.path, tc.body, code, body, tc.want)
		}
	}
	// None of those reset anything: the quota spent since the reset stands.
	if code, body = call(t, "GET", admin+"/admin/keys?"+q, "s3cret", ""); code != 200 {
		t.Fatal(code, body)
	}
	if decode(body); st.Remaining != 1 {
		t.Fatalf("after hostile requests: %s", body)
	}
}

// TestAPIChecksSharingState: two explicit checks of one key under limits
// that share its state (the same algorithm and version) are the caller's
// error, named as such, before anything is charged; another version keeps
// them apart.
func TestAPIChecksSharingState(t *testing.T) {
	url := startAPI(t, apiPolicy)
	code, _, body := postCheck(t, url, `{"checks": [{"key": "x", "limit": {"algorithm": "fixed_window", "rate": "5/m"}}, {"key": "x", "limit": {"algorithm": "fixed_window", "rate": "100/h"}}]}`)
	if code != 400 || !strings.Contains(body, "shares its state") {
		t.Fatalf("%d %s", code, body)
	}
	code, allowed, body := postCheck(t, url, `{"checks": [{"key": "x", "limit": {"algorithm": "fixed_window", "rate": "5/m"}}, {"key": "x", "limit": {"algorithm": "fixed_window", "rate": "100/h", "version": 1}}]}`)
	if code != 200 || !allowed {
		t.Fatalf("%d %s", code, body)
	}
}
