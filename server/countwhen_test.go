package server_test

import (
	"testing"
)

// TestAPISettleStatus: through the decision API, a limit with count_when
// reserves one unit per check; a settle with a status it lists keeps it,
// another status refunds it, no status keeps it (an outcome nobody
// reports counts), and a status that is not one is a 400.
func TestAPISettleStatus(t *testing.T) {
	base := startSettleAPI(t, `
rules:
  - name: login
    match: {path: /login}
    limits:
      - {name: login-failures, key: header:X-User, algorithm: fixed_window, limit: 10, window: 30d, count_when: {status: [401, "500-599"]}}
`, 0)
	check := func() string {
		t.Helper()
		a := post(t, base+"/v1/check", `{"request": {"method": "POST", "path": "/login", "headers": {"X-User": "ann"}}}`)
		if a.status != 200 || !a.check.Allowed || a.check.SettleToken == "" {
			t.Fatalf("check: %d %s", a.status, a.body)
		}
		return a.check.SettleToken
	}
	peek := func() int64 {
		t.Helper()
		a := post(t, base+"/v1/check", `{"request": {"method": "POST", "path": "/login", "headers": {"X-User": "ann"}}, "hits": 0}`)
		if len(a.check.Decisions) != 1 {
			t.Fatalf("peek: %d %s", a.status, a.body)
		}
		return a.check.Decisions[0].Remaining
	}
	for _, tc := range []struct {
		body    string
		status  int
		charged int64
	}{
		{`"status": 200`, 200, 0}, {`"status": 401`, 200, 1}, {`"status": 503`, 200, 1}, {``, 200, 1},
		{`"status": 99`, 400, 1}, {`"status": 600`, 400, 1}, {`"status": "401"`, 400, 1},
	} {
		before := peek()
		token := check()
		body := `{"token": "` + token + `"}`
		if tc.body != "" {
			body = `{"token": "` + token + `", ` + tc.body + `}`
		}
		if a := post(t, base+"/v1/settle", body); a.status != tc.status {
			t.Errorf("settle with %s: %d %s, want %d", tc.body, a.status, a.body, tc.status)
		}
		if got := before - peek(); got != tc.charged {
			t.Errorf("settle with %s: charged %d, want %d", tc.body, got, tc.charged)
		}
	}
}
