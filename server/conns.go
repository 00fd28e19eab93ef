package server

import (
	"cmp"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/server/listen"
)

// Defaults of the connection settings (Config.Timeouts, MaxConns,
// AdminMaxConns).
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxConns          = 4096
	DefaultAdminMaxConns     = 64
	DefaultMaxHeaderBytes    = 64 << 10
)

// The bounds of Config.MaxHeaderBytes.
const (
	minHeaderBytes = 4 << 10
	maxHeaderBytes = 16 << 20
)

// limits returns the bounds of the listener called name.
func (c *Config) limits(name string) listen.Limits {
	pick := func(d Duration, def time.Duration) time.Duration {
		if d == 0 {
			return def
		}
		return time.Duration(d)
	}
	l := listen.Limits{
		ReadHeader: pick(c.Timeouts.ReadHeader, DefaultReadHeaderTimeout),
		Read:       pick(c.Timeouts.Read, DefaultReadTimeout),
		Idle:       pick(c.Timeouts.Idle, DefaultIdleTimeout),
		MaxHeader:  cmp.Or(c.MaxHeaderBytes, DefaultMaxHeaderBytes),
	}
	n, def := c.MaxConns, DefaultMaxConns
	if name == "admin" {
		n, def = c.AdminMaxConns, DefaultAdminMaxConns
	}
	switch {
	case n == 0:
		l.MaxConns = def
	case n > 0:
		l.MaxConns = n
	}
	return l
}

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
			caps[name] = s.cfg.limits(name).MaxConns
		}
	}
	listen.WarnFileLimit(s.log, caps)
}
