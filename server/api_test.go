package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/server"
)

// startAPI runs a Server with only the decision API, on a memory store,
// under policy.
func startAPI(t *testing.T, policy string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := server.Defaults()
	cfg.Gateway, cfg.API, cfg.GRPC, cfg.Admin, cfg.Policy = "", "127.0.0.1:0", "", "", path
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
	return "http://" + srv.Addr("api") + "/v1/check"
}

// postCheck sends body, as bytes, and returns the status and whether the
// request was allowed.
func postCheck(t *testing.T, url, body string) (int, bool, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var a struct{ Allowed bool }
	json.Unmarshal(b, &a)
	return resp.StatusCode, a.Allowed, string(b)
}

const apiPolicy = `
rules:
  - name: api
    match: {path: /api/}
    limits:
      - {name: per-user, key: header:X-User, algorithm: fixed_window, limit: 1, window: 1h}
      - {name: per-sid, key: cookie:sid, algorithm: fixed_window, limit: 1, window: 1h}
  - name: beta
    match: {host: beta.example.com}
    limits:
      - {name: beta, key: host, algorithm: fixed_window, limit: 1, window: 1h}
`

// TestAPIKeysDoNotMeet: two different values a caller sends are never
// counted under one key. Invalid UTF-8 and escapes of lone surrogates
// (which encoding/json decodes to U+FFFD alike), a header named in two
// cases, a control byte in a header value and a cookie value the Cookie
// header would change are refused with 400; each pair below shares one
// counter of one request per hour unless it is refused.
func TestAPIKeysDoNotMeet(t *testing.T) {
	url := startAPI(t, apiPolicy)
	explicit := func(key string) string {
		return `{"checks": [{"key": "` + key + `", "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}]}`
	}
	header := func(v string) string {
		return `{"request": {"path": "/api/x", "headers": {"X-User": "` + v + `"}}}`
	}
	cookie := func(v string) string {
		return `{"request": {"path": "/api/x", "cookies": {"sid": "` + v + `"}}}`
	}
	for _, tc := range []struct{ desc, first, second string }{
		{"invalid UTF-8 keys", explicit("k\xff"), explicit("k\xfe")},
		{"lone surrogates", explicit(`k\ud800`), explicit(`k\udfff`)},
		{"a lone surrogate and U+FFFD", explicit(`s\udbff`), explicit("s\uFFFD")},
		{"invalid UTF-8 headers", header("u\xff"), header("u\xc3")},
		{"a header in two cases", `{"request": {"path": "/api/x", "headers": {"X-User": "a", "x-user": "b"}}}`, header("a")},
		{"a control byte in a header", header(`v\u0000`), header("v")},
		{"a cookie with a control byte", cookie(`to\u0001ken`), cookie("token")},
		{"a cookie with a quote", cookie(`q\"q`), cookie("qq")},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			code, _, body := postCheck(t, url, tc.first)
			if code != 400 {
				t.Fatalf("first: %d %s, want 400", code, body)
			}
			if code, allowed, body := postCheck(t, url, tc.second); code == 200 && !allowed {
				t.Fatalf("second: refused: it shared the first's counter: %s", body)
			}
		})
	}
	// Valid UTF-8 and surrogate pairs are keys of their own.
	for _, k := range []string{"é", "è", `\ud83d\ude00`, `\ud83d\ude01`} {
		if code, allowed, body := postCheck(t, url, explicit(k)); code != 200 || !allowed {
			t.Errorf("key %s: %d %s", k, code, body)
		}
	}
}

// TestAPITarget: request.host and request.path are normalised as the
// gateway normalises them (one host is one key, another spelling of a path
// matches the same rule), or refused with 400.
func TestAPITarget(t *testing.T) {
	url := startAPI(t, apiPolicy)
	for _, tc := range []struct {
		host, path, user string
		code             int
		decided          string // the limits that decided, in order
	}{
		{"beta.example.com", "/", "", 200, "beta=true"},
		{"BETA.example.com.", "/", "", 200, "beta=false"}, // the same host: its one request is spent
		{"beta.example.com:8443", "/", "", 200, "beta=false"},
		{"beta..example.com", "/", "", 400, ""},
		{"example.com", "/api%2Fx", "a", 400, ""},
		{"example.com", "/api;v=1/x", "a", 400, ""},
		{"example.com", "/api/%5c", "a", 400, ""},
		{"example.com", "/x/../%61pi/y", "b", 200, "per-user=true"},
		{"example.com", "//api//z", "b", 200, "per-user=false"},
	} {
		body := `{"request": {"host": "` + tc.host + `", "path": "` + tc.path + `", "headers": {"X-User": "` + tc.user + `"}}}`
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var a struct {
			Decisions []struct {
				Name    string
				Allowed bool
			}
		}
		json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		var decided []string
		for _, d := range a.Decisions {
			decided = append(decided, d.Name+"="+strconv.FormatBool(d.Allowed))
		}
		if got := strings.Join(decided, " "); resp.StatusCode != tc.code || got != tc.decided {
			t.Errorf("%s %s: %d %q, want %d %q", tc.host, tc.path, resp.StatusCode, got, tc.code, tc.decided)
		}
	}
}

// TestAPIKeyFields: each decision names its rule and limit and shows what
// its key is made of, one value per part of the limit's key, beside the
// opaque store key: under the limit's own key, under its on_missing key,
// for a global limit and for an explicit check.
func TestAPIKeyFields(t *testing.T) {
	url := startAPI(t, `
rules:
  - name: api
    limits:
      - {name: per-user, key: [header:X-User, ip], on_missing: [ip], algorithm: fixed_window, limit: 5, window: 1h}
      - {name: all, key: global, algorithm: fixed_window, limit: 50, window: 1h}
`)
	type decision struct {
		Rule      string
		Name      string
		Spec      string
		KeyParts  []string `json:"key_parts"`
		Values    []string
		OnMissing bool `json:"on_missing"`
		Key       string
	}
	answer := func(body string) []decision {
		t.Helper()
		code, _, b := postCheck(t, url, body)
		var a struct{ Decisions []decision }
		if err := json.Unmarshal([]byte(b), &a); code != 200 || err != nil {
			t.Fatalf("%d %v %s", code, err, b)
		}
		return a.Decisions
	}
	show := func(d decision) string {
		return d.Rule + " " + d.Name + " " + d.Spec + " " + strings.Join(d.KeyParts, "+") + "=" + strings.Join(d.Values, "+") + " " + strconv.FormatBool(d.OnMissing)
	}
	for body, want := range map[string][]string{
		`{"request": {"ip": "203.0.113.7", "headers": {"X-User": "ann"}}}`: {
			"api per-user fixed_window(5 per 1h) header:X-User+ip=ann+203.0.113.7 false", "api all fixed_window(50 per 1h) global=* false"},
		`{"request": {"ip": "203.0.113.7"}}`: {
			"api per-user fixed_window(5 per 1h) ip=203.0.113.7 true", "api all fixed_window(50 per 1h) global=* false"},
		`{"checks": [{"name": "mine", "key": "user:ann", "limit": {"algorithm": "gcra", "rate": "1/s"}}]}`: {
			" mine gcra(1/s, burst 1) key=user:ann false"},
	} {
		ds := answer(body)
		if len(ds) != len(want) {
			t.Fatalf("%s: %+v", body, ds)
		}
		for i, d := range ds {
			if show(d) != want[i] || d.Key == "" {
				t.Errorf("%s: decision %d %q, want %q (key %q)", body, i, show(d), want[i], d.Key)
			}
		}
	}
}
