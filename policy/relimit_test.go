package policy_test

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/policy"
)

// TestRelimit: a check planned under one policy is settled, after a
// reload, under the limit of the same rule and name in the new one, with
// the override of the same match; with none when the limit is gone, moved
// to another rule, or now keeps another state (algorithm, version), or
// when the override now makes the key unlimited.
func TestRelimit(t *testing.T) {
	const before = `
trusted_proxies: [192.0.2.0/24]
rules:
  - name: api
    limits:
      - name: per-user
        key: header:X-User
        algorithm: token_bucket
        rate: 10/h
        burst: 4
        overrides:
          - {key: acme, scale: 10}
          - {header: X-Plan, equals: gold, scale: 2}
`
	parse := func(src string) *policy.Policy {
		t.Helper()
		p, err := policy.Parse("p.yaml", []byte(src), policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := parse(before)
	plan := func(user, plan string) decide.Check {
		t.Helper()
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		r.Header.Set("X-User", user)
		if plan != "" {
			r.Header.Set("X-Plan", plan)
		}
		cs, err := old.Plan(r, nil)
		if err != nil || len(cs) != 1 {
			t.Fatalf("plan: %v %v", cs, err)
		}
		return cs[0]
	}
	ann, acme, gold := plan("ann", ""), plan("acme", ""), plan("bob", "gold")
	for _, c := range []struct {
		name  string
		after string // the edit of before
		check decide.Check
		want  string
	}{
		{"unchanged", before, ann, "token_bucket(10/h, burst 4) true"},
		{"raised", strings.Replace(before, "burst: 4", "burst: 10", 1), ann, "token_bucket(10/h, burst 10) true"},
		{"key override, raised", strings.Replace(before, "burst: 4", "burst: 10", 1), acme, "token_bucket(100/h, burst 100) true"},
		{"header override, raised", strings.Replace(before, "burst: 4", "burst: 10", 1), gold, "token_bucket(20/h, burst 20) true"},
		{"override rescaled", strings.Replace(before, "scale: 10", "scale: 3", 1), acme, "token_bucket(30/h, burst 12) true"},
		{"override removed", strings.Replace(before, "- {key: acme, scale: 10}", "", 1), acme, "token_bucket(10/h, burst 4) true"},
		{"override now unlimited", strings.Replace(before, "scale: 10", "unlimited: true", 1), acme, "token_bucket(100/h, burst 40) false"},
		{"version changed", strings.Replace(before, "burst: 4", "burst: 10\n        version: 1", 1), ann, "token_bucket(10/h, burst 4) false"},
		{"algorithm changed", strings.Replace(strings.Replace(before, "token_bucket", "gcra", 1), "burst: 4", "burst: 10", 1), ann, "token_bucket(10/h, burst 4) false"},
		{"limit renamed", strings.Replace(before, "name: per-user", "name: per-person", 1), ann, "token_bucket(10/h, burst 4) false"},
		{"rule renamed", strings.Replace(before, "name: api", "name: web", 1), ann, "token_bucket(10/h, burst 4) false"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lim, ok := parse(c.after).Relimit(&c.check)
			if got := fmt.Sprintf("%s %v", lim, ok); got != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
	if n := testing.AllocsPerRun(100, func() { old.Relimit(&gold) }); n != 0 {
		t.Errorf("Relimit allocates %v times", n)
	}
	var none *policy.Policy
	if lim, ok := none.Relimit(&ann); ok || lim != ann.Limit {
		t.Errorf("a nil policy: %s %v", lim, ok)
	}
}
