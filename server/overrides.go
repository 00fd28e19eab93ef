package server

import (
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/server/bans"
	"github.com/sluicehq/sluice/server/overrides"
)

// buildOverrides makes the runtime overrides: kept in Redis on a Redis
// store, else in the state directory's file (in memory without one), and
// polled for changes until the store closes; and the index of bans, in
// Redis or in memory.
func buildOverrides(s *Server) error {
	var k overrides.Keeper
	switch b := s.backend; {
	case b.client != nil:
		k = overrides.NewRedis(b.client, b.prefix)
	case s.cfg.StateDir != "":
		var err error
		if k, err = overrides.NewFile(s.cfg.StateDir); err != nil {
			return err
		}
	default:
		k = overrides.NewMemory()
	}
	var svc *overrides.Service
	changed := s.metrics.WatchOverrides(func() int { return svc.Len() })
	svc, err := overrides.New(overrides.Config{Keeper: k, Policy: s.currentPolicy, Logger: s.log, ShowKeys: s.cfg.ShowKeys, Changed: changed, Named: s.rlsNamed})
	if err != nil {
		return err
	}
	svc.Start()
	s.overrides = svc
	s.bans = bans.NewMemory()
	if b := s.backend; b.client != nil {
		s.bans = bans.NewRedis(b.client, b.prefix)
	}
	closeStore := s.backend.close
	s.backend.close = func() error {
		svc.Close()
		return closeStore()
	}
	return nil
}

// rlsNamed finds a limit of the Envoy rate limit service by its name, for
// runtime overrides; none without the service.
func (s *Server) rlsNamed(name string) (sluice.Limit, bool) {
	if s.rls == nil {
		return sluice.Limit{}, false
	}
	return s.rls.Named(name)
}
