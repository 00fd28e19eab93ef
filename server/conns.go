package server

import (
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/server/listen"
)

// tooLargeCounter counts the 431s of a listener: in the gateway's
// responses, as any other answer of the gateway.
func (s *Server) tooLargeCounter(name string) func() {
	if name != "gateway" {
		return func() {}
	}
	return s.metrics.Responses.WithLabelValues("431").Inc
}

// refusedCounter counts refused connections per listener and logs them at
// most once a second.
func (s *Server) refusedCounter(name string) func() {
	s.metrics.Refused.WithLabelValues(name) // exported from zero
	var last atomic.Int64
	return func() {
		s.metrics.Refused.WithLabelValues(name).Inc()
		if now := time.Now().Unix(); last.Swap(now) != now {
			s.log.Warn("connection refused: the listener is at its max_conns", "listener", name)
		}
	}
}

// warnFileLimit logs when the listeners' connection caps add up to more
// file descriptors than the process may open (listen.WarnFileLimit).
func (s *Server) warnFileLimit() {
	caps := map[string]int{}
	for name, addr := range map[string]string{"gateway": s.cfg.Gateway, "api": s.cfg.API, "grpc": s.cfg.GRPC, "admin": s.cfg.Admin} {
		if addr != "" {
			caps[name] = s.cfg.Limits(name).MaxConns
		}
	}
	listen.WarnFileLimit(s.log, caps)
}
