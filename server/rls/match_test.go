package rls

import (
	"fmt"
	"strings"
	"testing"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// TestValidConfigs: configurations that load, and which limit each request
// descriptor gets under them. The first cases restate the examples of
// envoyproxy/ratelimit's README with values of our own.
func TestValidConfigs(t *testing.T) {
	cases := []struct {
		name, yaml string
		probes     map[string]string // "k=v,k2=v2" -> "path rpu/unit [flags]" or "none"
	}{
		{"wildcards anywhere, in file order, the key's '*' over key_value", `
domain: w
descriptors:
  - key: path
    value: /api/*/users/*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: "svc*"
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: a
    value: "b_*"
    rate_limit: {unit: second, requests_per_unit: 4}
`, map[string]string{
			"path=/api/v1/users/7": "path=/api/*/users/* 1/SECOND",
			"path=/api/v1/users":   "path=/api/* 2/SECOND",
			"path=/api/":           "path=/api/* 2/SECOND",
			"path=/apx":            "none",
			"svc_a=x":              "svc* 3/SECOND",
			"svcb=":                "svc* 3/SECOND",
			"a=b_c":                "a=b_* 4/SECOND",
			"a_b=c":                "none", // the peer joins key and value: it would match
		}},
		{"two values of one key (README example 1)", `
domain: db_ops
descriptors:
  - key: table
    value: accounts
    rate_limit: {unit: second, requests_per_unit: 300}
  - key: table
    value: audit
    rate_limit: {unit: second, requests_per_unit: 300}
`, map[string]string{
			"table=accounts": "table=accounts 300/SECOND",
			"table=audit":    "table=audit 300/SECOND",
			"table=other":    "none",
		}},
		{"nested list and a key without value (README example 2)", `
domain: sms
descriptors:
  # a handful of promotional texts per recipient per day
  - key: kind
    value: promo
    descriptors:
      - key: recipient
        rate_limit:
          unit: day
          requests_per_unit: 3
  # and a daily cap per recipient for everything
  - key: recipient
    rate_limit:
      unit: day
      requests_per_unit: 50
`, map[string]string{
			"kind=promo,recipient=555": "kind=promo/recipient 3/DAY",
			"recipient=555":            "recipient 50/DAY",
			"kind=promo":               "none",
			"kind=alert,recipient=555": "none",
		}},
		{"key and value beat key alone (README example 3)", `
domain: per_ip
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: remote_address
    value: 203.0.113.9
    rate_limit: {unit: second, requests_per_unit: 0}
`, map[string]string{
			"remote_address=203.0.113.9": "remote_address=203.0.113.9 0/SECOND",
			"remote_address=203.0.113.8": "remote_address 20/SECOND",
			"remote_address=":            "remote_address 20/SECOND",
		}},
		{"depth must match (README example 4)", `
domain: depth
descriptors:
  - key: a
    value: b
    descriptors:
      - key: c
        rate_limit: {requests_per_unit: 30, unit: second}
`, map[string]string{
			"a=b,c=d":     "a=b/c 30/SECOND",
			"a=b":         "none",
			"a=b,c=d,e=f": "none",
		}},
		{"unlimited (README example 5)", `
domain: internal
descriptors:
  - key: directory
    rate_limit:
      unlimited: true
  - key: storage
    rate_limit: {unit: minute, requests_per_unit: 60}
`, map[string]string{
			"directory=x": "directory unlimited",
			"storage=y":   "storage 60/MINUTE",
		}},
		{"shadow mode (README example 6)", `
domain: login
descriptors:
  - key: service
    descriptors:
      - key: user
        value: tester
        rate_limit: {requests_per_unit: 5, unit: second}
        shadow_mode: true
      - key: user
        value: other
        rate_limit: {requests_per_unit: 15, unit: second}
`, map[string]string{
			"service=s,user=tester": "service/user=tester 5/SECOND shadow",
			"service=s,user=other":  "service/user=other 15/SECOND",
		}},
		{"replaces (README example 7)", `
domain: repl
descriptors:
  - key: k1
    value: v1
    descriptors:
      - key: user
        value: u
        rate_limit:
          name: narrow
          requests_per_unit: 4
          unit: second
  - key: k2
    value: v2
    descriptors:
      - key: user
        value: u
        rate_limit:
          replaces:
            - name: narrow
          requests_per_unit: 8
          unit: second
`, map[string]string{
			"k1=v1,user=u": "k1=v1/user=u 4/SECOND name=narrow",
			"k2=v2,user=u": "k2=v2/user=u 8/SECOND replaces=narrow",
		}},
		{"detailed_metric (README example 8)", `
domain: detail
descriptors:
  - key: k
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: k
    value: special
    rate_limit: {unit: minute, requests_per_unit: 20}
`, map[string]string{
			"k=any":     "k 10/MINUTE detailed",
			"k=special": "k=special 20/MINUTE",
		}},
		{"wildcard values (README example 9), at any depth", `
domain: wild
descriptors:
  - key: path
    value: /v1/*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: path
    value: /v1/admin*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /v1/status
    rate_limit: {unit: minute, requests_per_unit: 200}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: tenant
    descriptors:
      - key: path
        value: /x*
        rate_limit: {unit: hour, requests_per_unit: 7}
`, map[string]string{
			"path=/v1/users":   "path=/v1/* 20/MINUTE",
			"path=/v1/admin/x": "path=/v1/* 20/MINUTE", // the first wildcard in file order wins
			"path=/v1/status":  "path=/v1/status 200/MINUTE",
			"path=/v2":         "path 1000/MINUTE",
			"tenant=t,path=/x": "tenant/path=/x* 7/HOUR",
			"tenant=t,path=/y": "none",
		}},
		{"units in any case, multiplier and the sluice block", `
domain: ext
descriptors:
  - key: a
    rate_limit: {unit: SECOND, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: Minute, unit_multiplier: 5, requests_per_unit: 10}
  - key: c
    rate_limit:
      unit: second
      requests_per_unit: 10
      sluice: {algorithm: token_bucket, burst: 40}
  - key: d
    rate_limit:
      unit: minute
      requests_per_unit: 600
      sluice: {algorithm: leaky_bucket, queue: 5, nodelay: 2}
  - key: e
    rate_limit:
      unit: day
      requests_per_unit: 1000
      sluice: {algorithm: sliding_window}
  - key: f
    rate_limit:
      unit: week
      requests_per_unit: 1
    shadow_mode: yes
`, map[string]string{
			"a=1": "a 10/SECOND",
			"b=1": "b 10/MINUTE x5 fixed_window(10 per 5m)",
			"c=1": "c 10/SECOND token_bucket(10/s, burst 40)",
			"d=1": "d 600/MINUTE leaky_bucket(600/m, queue 5, nodelay 2)",
			"e=1": "e 1000/DAY sliding_window(1000 per 1d)",
			"f=1": "f 1/WEEK shadow",
		}},
		{"a domain without descriptors", "domain: quiet\n", map[string]string{"a=b": "none"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseConfig("valid.yaml", []byte(c.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.domains) != 1 {
				t.Fatalf("%d domains", len(cfg.domains))
			}
			var d *domain
			for _, d = range cfg.domains {
			}
			for probe, want := range c.probes {
				var entries []*commonpb.RateLimitDescriptor_Entry
				for _, kv := range strings.Split(probe, ",") {
					k, v, _ := strings.Cut(kv, "=")
					entries = append(entries, &commonpb.RateLimitDescriptor_Entry{Key: k, Value: v})
				}
				r, _ := d.match(entries)
				if got := describe(r); !strings.HasPrefix(got, want) || (want == "none") != (got == "none") {
					t.Errorf("%s: got %q, want %q", probe, got, want)
				}
			}
		})
	}
}

func describe(r *rule) string {
	if r == nil {
		return "none"
	}
	if r.unlimited {
		return r.path + " unlimited"
	}
	s := fmt.Sprintf("%s %d/%s", r.path, r.rpu, r.unit)
	if r.mult != 1 {
		s += fmt.Sprintf(" x%d", r.mult)
	}
	if r.limit.Algorithm != 0 && (r.limit.Algorithm.String() != "fixed_window" || r.mult != 1) {
		s += " " + r.limit.String()
	}
	if r.shadow {
		s += " shadow"
	}
	if r.name != "" {
		s += " name=" + r.name
	}
	if len(r.replaces) > 0 {
		s += " replaces=" + strings.Join(r.replaces, ",")
	}
	if r.detailed {
		s += " detailed"
	}
	return s
}
