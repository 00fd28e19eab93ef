package server

import (
	"log/slog"

	"github.com/sluicehq/sluice/server/listen"
)

// warnFileLimit logs when the listeners' connection caps add up to more
// file descriptors than the process may open (listen.WarnFileLimit).
func warnFileLimit(cfg *Config, log *slog.Logger) {
	caps := map[string]int{}
	for name, addr := range map[string]string{"gateway": cfg.Gateway, "api": cfg.API, "grpc": cfg.GRPC, "admin": cfg.Admin} {
		if addr != "" {
			caps[name] = cfg.Limits(name).MaxConns
		}
	}
	listen.WarnFileLimit(log, caps)
}
