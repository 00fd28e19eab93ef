package sluiceprom_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluiceprom"
)

// A service limits its handler with httplimit and exports the decisions
// on its own /metrics.
func Example() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	m := sluiceprom.New(sluiceprom.Config{Limits: []string{"per-ip"}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	limit, err := httplimit.New(sluice.New(store), httplimit.Config{
		Limits:    []httplimit.Limit{{Name: "per-ip", Key: httplimit.ByIP(&httplimit.ClientIP{}), Limit: sluice.FixedWindow(5, time.Minute)}},
		Observe:   m.ObserveHTTP,
		OnWaiting: m.OnWaiting,
	})
	if err != nil {
		panic(err)
	}
	handler := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 7 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113.7:4711"
		handler.ServeHTTP(httptest.NewRecorder(), r)
	}
	printSeries(reg, "sluice_decisions_total", "sluice_near_limit_total")
	// Output:
	// sluice_decisions_total{degraded="false",limit="per-ip",outcome="admitted"} 5
	// sluice_decisions_total{degraded="false",limit="per-ip",outcome="admitted_uncounted"} 0
	// sluice_decisions_total{degraded="false",limit="per-ip",outcome="delayed"} 0
	// sluice_decisions_total{degraded="false",limit="per-ip",outcome="failed"} 0
	// sluice_decisions_total{degraded="false",limit="per-ip",outcome="invalid"} 0
	// sluice_decisions_total{degraded="false",limit="per-ip",outcome="refused"} 2
	// sluice_near_limit_total{limit="per-ip"} 2
}

// printSeries prints the samples of the named families as /metrics shows
// them.
func printSeries(reg *prometheus.Registry, names ...string) {
	fams, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	var b strings.Builder
	for _, f := range fams {
		for _, n := range names {
			if f.GetName() == n {
				expfmt.MetricFamilyToText(&b, f)
			}
		}
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			fmt.Fprintln(os.Stdout, line)
		}
	}
}
