package server

import (
	"net"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/server/admin"
	"github.com/sluicehq/sluice/server/metrics"
)

// The status page's history: a point every historyStep for the last
// historyWindow.
const (
	historyStep   = 2 * time.Second
	historyWindow = 10 * time.Minute
)

// closeOnceBg stops the background work of Start.
func (s *Server) closeOnceBg() {
	s.stopOnce.Do(func() { close(s.stopBg) })
}

// knownLimits gives the decision series of every limit of the policy
// (the gateway's and the decision API's) and of the RLS configs their zero
// samples.
func (s *Server) knownLimits() {
	var ls []metrics.KnownLimit
	for _, r := range s.currentPolicy().Rules {
		for _, l := range r.Limits {
			ls = append(ls, metrics.KnownLimit{Name: l.Name, Shadow: r.Shadow, Late: l.Late() != nil})
		}
	}
	if s.cfg.Gateway != "" {
		s.metrics.KnownLimits("gateway", ls)
	}
	if s.cfg.API != "" { // the policy's limits, and explicit checks
		s.metrics.KnownLimits("api", append(ls, metrics.KnownLimit{Name: "explicit", Late: true}))
	}
	if s.rls != nil {
		s.metrics.KnownLimits("rls", s.rls.Limits())
	}
}

// adminHandler is the admin listener's handler.
func (s *Server) adminHandler() http.Handler {
	upstream := s.cfg.Upstream
	if upstream == "" && s.cfg.Gateway != "" {
		upstream = "built-in demo"
	}
	var domains func() []string
	if s.rls != nil {
		domains = s.rls.Domains
	}
	b := s.backend
	return admin.Handler(admin.Config{
		Version: s.version, Started: s.started, Upstream: upstream, RLS: s.cfg.RLS, Pprof: s.cfg.Pprof,
		Registry: s.metrics.Reg, Stats: s.stats, Keys: s.keys, Logger: s.log, Overrides: s.overrides.Handler(), Bans: s.bans,
		Store:  admin.Store{Desc: b.desc, Store: b.store, Keys: b.keys, Probe: b.readiness, Failover: b.failover, Leases: b.leases},
		Policy: s.currentPolicy, Ready: s.ready.Load, Loaded: s.loaded.Load, Listeners: func() map[string]string { return listenerAddrs(s.listeners) },
		RLSDomains: domains, Shed: s.sheds.Stats,
	})
}

// listenerAddrs are the bound addresses of lns, by listener.
func listenerAddrs(lns map[string]net.Listener) map[string]string {
	m := map[string]string{}
	for name, ln := range lns {
		m[name] = ln.Addr().String()
	}
	return m
}
