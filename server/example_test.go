package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/server"
)

// A Server embedded in another program: the sample policy in front of the
// demo upstream, on free loopback ports.
func Example() {
	cfg := server.Defaults()
	cfg.Gateway, cfg.API, cfg.GRPC, cfg.Admin = "127.0.0.1:0", "", "", "127.0.0.1:0"
	srv, err := server.New(cfg, server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	if err := srv.Start(); err != nil {
		panic(err)
	}
	for range 6 {
		resp, err := http.Get("http://" + srv.Addr("gateway") + "/")
		if err != nil {
			panic(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fmt.Println(srv.Shutdown(ctx))
	// Output:
	// 200 "per-ip";q=5;w=5
	// 200 "per-ip";q=5;w=5
	// 200 "per-ip";q=5;w=5
	// 200 "per-ip";q=5;w=5
	// 200 "per-ip";q=5;w=5
	// 429 "per-ip";q=5;w=5
	// <nil>
}

// Settings come from defaults, a file, SLUICE_* variables and flags, each
// overriding the one before; Validate names every field that cannot work.
func ExampleConfig_Validate() {
	cfg := server.Defaults()
	env := map[string]string{"SLUICE_STORE": "redis", "SLUICE_LOG_LEVEL": "loud"}
	if err := cfg.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		panic(err)
	}
	cfg.Set("upstream", "--upstream", "localhost:3000")
	fmt.Println(cfg.Validate())
	// Output:
	// upstream: "localhost:3000": want an http:// or https:// URL with a host
	// store.redis.addrs: missing: redis needs at least one host:port
	// log.level: "loud": want debug, info, warn or error
}
