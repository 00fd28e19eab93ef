package metrics

import "github.com/prometheus/client_golang/prometheus"

// WatchOverrides exports the runtime overrides: sluice_overrides_changes_total
// (by op: set, delete, expire; from zero) and sluice_overrides (how many
// apply, from count). It returns the function that counts a change.
func (m *Metrics) WatchOverrides(count func() int) (changed func(op string)) {
	changes := counterVec("sluice_overrides_changes_total", "Changes of the runtime overrides made through this instance's admin API (set, delete), and expiries it removed (expire).", "op")
	for _, op := range []string{"set", "delete", "expire"} {
		changes.WithLabelValues(op)
	}
	applied := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_overrides", Help: "Runtime overrides this instance applies now (kept in the store: the same on every instance once it has polled)."},
		func() float64 { return float64(count()) })
	m.Reg.MustRegister(changes, applied)
	return func(op string) { changes.WithLabelValues(op).Inc() }
}
