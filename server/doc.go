// Package server is sluice serve: a rate limiting gateway (a reverse proxy
// that applies a policy), a decision API for callers in any language
// (POST /v1/check, docs/api.md), an Envoy rate limit service (gRPC
// ShouldRateLimit over envoyproxy/ratelimit's descriptor configs), and an
// admin listener with Prometheus metrics, health and readiness probes and a
// live status page. All share one store (memory or Redis) and one policy,
// and reload their configs on SIGHUP or when a file they were read from changes.
//
// The package only wires: each job is a package under it (config, listen,
// gateway, api, envoy and rls, admin, metrics, shedding, watch, keyview),
// and New builds them from the Config.
//
// cmd/sluice is its command line; most users run that. The package is for
// embedding the same server in another program:
//
//	cfg := server.Defaults()
//	cfg.Policy = "policy.yaml"
//	cfg.Upstream = "http://127.0.0.1:3000"
//	srv, err := server.New(cfg, server.Options{})
//	if err != nil { ... }
//	err = srv.Run(ctx) // until ctx ends, then drains in-flight requests
package server
