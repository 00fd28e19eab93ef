package policy_test

import (
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/policy"
)

// TestRuntimeRelimit: a check planned under a runtime override settles
// under the override in force when the settle arrives: the same one, the
// limit's own once it is deleted, and its own limit kept (ok false) once
// the key is unlimited.
func TestRuntimeRelimit(t *testing.T) {
	rt := tiers{"per-tenant": {"acme": {Scale: 3}}}
	p, err := policy.Parse("policy.yaml", []byte(`
rules:
  - name: tenant
    limits:
      - {name: per-tenant, key: "header:X-Tenant", algorithm: fixed_window, rate: 2/h}
      - {name: per-ip, key: ip, algorithm: token_bucket, rate: 1/s, burst: 4}
`), policy.Options{Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Tenant", "acme")
	checks, _ := p.Plan(r, nil)
	c := checks[0]
	if c.Override != "runtime=acme" || c.Limit.Count != 6 {
		t.Fatalf("planned %v under %q, want 6/h under the runtime override", c.Limit, c.Override)
	}
	if lim, ok := p.Relimit(&c); !ok || lim.Count != 6 {
		t.Errorf("relimit: %v %v, want the override's 6/h", lim, ok)
	}
	delete(rt["per-tenant"], "acme")
	if lim, ok := p.Relimit(&c); !ok || lim.Count != 2 {
		t.Errorf("relimit after the delete: %v %v, want the limit's own 2/h", lim, ok)
	}
	rt["per-tenant"]["acme"] = policy.RuntimeOverride{Unlimited: true}
	if lim, ok := p.Relimit(&c); ok || lim.Count != 6 {
		t.Errorf("relimit once unlimited: %v %v, want the check's own limit and false", lim, ok)
	}
	_, perIP := p.FindLimit("per-ip")
	for in, want := range map[string]string{"::ffff:192.0.2.1": "192.0.2.1", " 192.0.2.1": "192.0.2.1", "2001:db8::1": "2001:db8::/64"} {
		if got, err := p.KeyValue(perIP, in); err != nil || got != want {
			t.Errorf("KeyValue(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := p.KeyValue(perIP, "a.b.c.d"); err == nil {
		t.Error("KeyValue of a name for an ip key: no error")
	}
}
