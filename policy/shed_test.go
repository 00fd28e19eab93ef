package policy

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/shed"
)

const shedPolicy = `
trusted_proxies: [10.0.0.0/8]
shed:
  algorithm: gradient2
  initial_limit: 50
  max_limit: 400
  sheddable_share: 0.5
  critical_wait: 0s
  retry_after: 2s
  priority_header: X-Priority
  cpu_threshold: 0.8
rules:
  - name: checkout
    match: {path: /checkout/}
    priority: critical
    limits:
      - {name: per-ip, key: ip, algorithm: gcra, rate: 10/s}
  - name: reports
    match: {path: /reports/}
    priority: sheddable
`

func TestShedSection(t *testing.T) {
	p, err := Parse("shed.yaml", []byte(shedPolicy), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := Shed{Algorithm: "gradient2", InitialLimit: 50, MaxLimit: 400, SheddableShare: 0.5, CriticalWait: -1, RetryAfter: 2 * time.Second, PriorityHeader: "X-Priority", CPUThreshold: 0.8}
	if p.Shed == nil || *p.Shed != want {
		t.Fatalf("shed section %+v, want %+v", p.Shed, want)
	}
	if c := p.Shed.Config(); c.Algorithm.Name() != "gradient2" || c.CriticalWait != -1 || c.InitialLimit != 50 || c.CPUThreshold != 0.8 {
		t.Fatalf("Config() = %+v", c)
	}
	if !slices.Contains(p.ProtectedHeaders(), "X-Priority") {
		t.Errorf("protected headers %v lack the priority header", p.ProtectedHeaders())
	}
	if len(p.Rules) != 2 || len(p.Rules[1].Limits) != 0 {
		t.Errorf("a rule with a priority and no limits: %+v", p.Rules)
	}
	for _, c := range []struct {
		peer, path, header string
		want               shed.Priority
	}{
		{"203.0.113.9:1", "/checkout/pay", "", shed.Critical},       // the route
		{"203.0.113.9:1", "/Reports/daily", "", shed.Sheddable},     // matched as the policy matches
		{"203.0.113.9:1", "/other", "", shed.Default},               // no rule names one
		{"203.0.113.9:1", "/reports/x", "critical", shed.Sheddable}, // untrusted: the header is ignored
		{"10.0.0.1:1", "/reports/x", "critical", shed.Critical},     // a trusted proxy's header wins
		{"10.0.0.1:1", "/checkout/", "sheddable", shed.Sheddable},   // either way
		{"10.0.0.1:1", "/checkout/", "urgent", shed.Critical},       // a bad value: the route
		{"10.0.0.1:1", "/checkout/a%2fb", "", shed.Default},         // Normalize refuses it
		{"10.0.0.1:1", "/reports/", strings.Repeat("c", 1<<16), shed.Sheddable},
	} {
		r := httptest.NewRequest("GET", "http://example.com"+c.path, nil)
		r.RemoteAddr = c.peer
		if c.header != "" {
			r.Header.Set("X-Priority", c.header)
		}
		if got := p.Priority(r); got != c.want {
			t.Errorf("%s %s %.20q: %v, want %v", c.peer, c.path, c.header, got, c.want)
		}
	}
}

func TestShedBBRWarns(t *testing.T) {
	p, err := Parse("bbr.yaml", []byte("shed: {algorithm: bbr}\nrules:\n  - {name: r, priority: critical}\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "bbr.yaml:1: shed.algorithm: bbr without cpu_threshold") {
		t.Fatalf("warnings %q", p.Warnings)
	}
	if p.Shed.Config().Algorithm.Name() != "bbr" {
		t.Fatal("not bbr")
	}
	p, _ = Parse("bbr.yaml", []byte("shed: {algorithm: bbr, cpu_threshold: 0.8}\nrules:\n  - {name: r, priority: critical}\n"), Options{})
	if len(p.Warnings) != 0 {
		t.Fatalf("warnings with a cpu_threshold: %q", p.Warnings)
	}
}
