package sluiceprom_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/sluiceprom"
)

// TestCollector: each kind of observation lands in its series, with the
// configured namespace and constant labels, and the exposition passes
// Prometheus's lint.
func TestCollector(t *testing.T) {
	m := sluiceprom.New(sluiceprom.Config{Namespace: "shop", ConstLabels: prometheus.Labels{"service": "cart"}, Limits: []string{"per-user"}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	m.Observe(decide.Observation{Limit: "per-user", Outcome: decide.Admitted, Decision: sluice.Decision{Allowed: true, Limit: 10, Remaining: 1}})
	m.Observe(decide.Observation{Limit: "per-user", Outcome: decide.Admitted, Decision: sluice.Decision{Allowed: true, Limit: 10, Degraded: true}})
	m.Observe(decide.Observation{Limit: "shaper", Outcome: decide.Delayed, Decision: sluice.Decision{Allowed: true, Limit: 5, Remaining: 3, Delay: 40 * time.Millisecond}})
	m.Observe(decide.Observation{Limit: "trial", Outcome: decide.ShadowRefused})
	m.Observe(decide.Observation{Limit: "trial", Outcome: decide.ShadowAdmitted})
	m.OnWaiting("shaper", 1)
	m.OnWaiting("shaper", 1)
	m.OnWaiting("shaper", -1)
	text := exposition(t, reg)
	for _, want := range []string{
		`shop_near_limit_total{limit="per-user",service="cart"} 2`,
		`shop_waiting_requests{limit="per-user",service="cart"} 0`,
		`shop_waiting_requests{limit="shaper",service="cart"} 1`,
		`shop_decisions_total{degraded="false",limit="per-user",outcome="admitted",service="cart"} 1`,
		`shop_decisions_total{degraded="true",limit="per-user",outcome="admitted",service="cart"} 1`,
		`shop_decisions_total{degraded="false",limit="per-user",outcome="refused",service="cart"} 0`,
		`shop_decisions_total{degraded="false",limit="shaper",outcome="delayed",service="cart"} 1`,
		`shop_decisions_total{degraded="false",limit="trial",outcome="shadow_refused",service="cart"} 1`,
		`shop_decisions_total{degraded="false",limit="trial",outcome="shadow_admitted",service="cart"} 1`,
		`shop_shaping_delay_seconds_bucket{service="cart",le="0.025"} 0`,
		`shop_shaping_delay_seconds_bucket{service="cart",le="0.05"} 1`,
	} {
		if !strings.Contains(text, "\n"+want+"\n") {
			t.Errorf("the exposition lacks %s", want)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(gather(t, reg)).Lint()
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	if t.Failed() {
		t.Log(text)
	}
}

func gather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// exposition returns what /metrics would show of reg.
func exposition(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("\n")
	for _, f := range gather(t, reg) {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}
