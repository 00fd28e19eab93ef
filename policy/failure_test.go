package policy_test

import (
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/policy"
)

// TestFailureMode: each rule's on_error reaches failover through the keys
// Plan makes, including rule names that contain colons and digits.
func TestFailureMode(t *testing.T) {
	p, err := policy.Parse("modes.yaml", []byte(`
rules:
  - name: "12:open"
    match: {path: /open/}
    limits: [{name: o, key: ip, algorithm: gcra, rate: 1/s}]
    action: {on_error: open}
  - name: closed
    match: {path: /closed/}
    limits: [{name: c, key: global, algorithm: gcra, rate: 1/s}]
    action: {on_error: closed}
  - name: fallback
    match: {path: /fallback/}
    limits: [{name: f1, key: global, algorithm: gcra, rate: 1/s}, {name: f2, key: ip, algorithm: fixed_window, limit: 5, window: 1s}]
    action: {on_error: fallback}
  - name: default
    match: {path: /default/}
    limits: [{name: d, key: global, algorithm: gcra, rate: 1/s}]
`), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path       string
		want       failover.Mode
		failClosed bool
	}{
		{"/open/x", failover.FailOpen, false},
		{"/closed/x", failover.FailClosed, true},
		{"/fallback/x", failover.Fallback, false},
		{"/default/x", failover.FailOpen, false},
	} {
		planned, err := p.Plan(httptest.NewRequest("GET", c.path, nil), nil)
		if err != nil || len(planned) == 0 {
			t.Fatalf("%s: %v, %d planned", c.path, err, len(planned))
		}
		for _, pl := range planned {
			got := p.FailureMode(sluice.Request{Key: pl.Key, Limit: pl.Limit, Cost: pl.Cost})
			if got != c.want || pl.Action.FailClosed != c.failClosed {
				t.Errorf("%s: limit %s: mode %v, FailClosed %v; want %v, %v", c.path, pl.Name, got, pl.Action.FailClosed, c.want, c.failClosed)
			}
		}
	}
	for _, key := range []string{"", "x", ":", "99:short", "-1:x", "3:abc"} {
		if got := p.FailureMode(sluice.Request{Key: key}); got != failover.FailOpen {
			t.Errorf("key %q not from this policy: mode %v, want open", key, got)
		}
	}
	var _ func(sluice.Request) failover.Mode = p.FailureMode
	var _ httplimit.Source = p
}
