package main

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/internal/redistest"
)

func rlsClient(t *testing.T, addr string) rlspb.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

func descriptor(kv ...string) *commonpb.RateLimitDescriptor {
	d := &commonpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

const edgeConfig = `domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: %d
  - key: path
    value: /login
    rate_limit:
      unit: hour
      requests_per_unit: 1000
      sluice:
        algorithm: token_bucket
        burst: 2
`

// TestRLS drives `sluice serve --rls` with the go-control-plane client:
// exact counts, the per-descriptor status, a reload of the config file,
// and the gRPC health service.
func TestRLS(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "edge.yaml")
	writeFile(t, path, sprintf(edgeConfig, 3))
	p := start(t, nil, "--rls", dir)
	c := rlsClient(t, p.addrs["grpc"])
	ask := func(ds ...*commonpb.RateLimitDescriptor) *rlspb.RateLimitResponse {
		t.Helper()
		r, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge", Descriptors: ds})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for i := range 4 {
		r := ask(descriptor("remote_address", "10.0.0.1"))
		want := rlspb.RateLimitResponse_OK
		if i == 3 {
			want = rlspb.RateLimitResponse_OVER_LIMIT
		}
		st := r.Statuses[0]
		if r.OverallCode != want || st.CurrentLimit.GetRequestsPerUnit() != 3 || st.LimitRemaining != uint32(max(0, 2-i)) {
			t.Fatalf("request %d: %v", i, r)
		}
		if i == 3 && (st.DurationUntilReset.AsDuration() <= 0 || st.DurationUntilReset.AsDuration() > time.Minute) {
			t.Errorf("duration_until_reset %v", st.DurationUntilReset.AsDuration())
		}
	}
	// The sluice extension: a token bucket of burst 2 on /login.
	codes := ""
	for range 3 {
		codes += ask(descriptor("path", "/login")).OverallCode.String() + " "
	}
	if codes != "OK OK OVER_LIMIT " {
		t.Errorf("token bucket descriptor: %s", codes)
	}
	if r := ask(descriptor("unknown", "x")); r.OverallCode != rlspb.RateLimitResponse_OK || r.Statuses[0].CurrentLimit != nil {
		t.Errorf("unmatched descriptor: %v", r)
	}
	if got := metric(t, p, `sluice_decisions_total{degraded="false",limit="edge/remote_address",outcome="refused",source="rls"}`); got != 1 {
		t.Errorf("rls refusals metric = %v", got)
	}

	writeFile(t, path, sprintf(edgeConfig, 10))
	waitFor(t, "the RLS config to reload", func() bool {
		return ask(descriptor("remote_address", "10.0.0.2")).Statuses[0].CurrentLimit.GetRequestsPerUnit() == 10
	})
	writeFile(t, path, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: sec, requests_per_unit: 1}\n")
	waitFor(t, "the broken RLS config to be rejected", func() bool {
		return metric(t, p, `sluice_config_reloads_total{config="rls",result="error"}`) >= 1
	})
	if got := ask(descriptor("remote_address", "10.0.0.3")).Statuses[0].CurrentLimit.GetRequestsPerUnit(); got != 10 {
		t.Errorf("after a broken config the limit is %d, want the previous 10", got)
	}

	conn, _ := grpc.NewClient(p.addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	hr, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health: %v %v", hr, err)
	}
}

// TestThreeInstancesShareRedis runs three sluice processes on one Redis;
// clients spread over all three gateways and RLS listeners are admitted
// exactly as often as the one global limit allows, not three times.
func TestThreeInstancesShareRedis(t *testing.T) {
	for _, mode := range []string{"standalone", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			var addrs string
			if mode == "standalone" {
				addrs = redistest.Standalone(t).Options().Addr
			} else {
				addrs = joinComma(redistest.Cluster(t).Options().Addrs)
			}
			prefix := redistest.Prefix(t)
			dir := t.TempDir()
			policy := filepath.Join(dir, "policy.yaml")
			// A token bucket that refills one request an hour: over a few
			// seconds its bound is exactly its burst.
			writeFile(t, policy, `
rules:
  - name: all
    limits:
      - {name: global, key: global, algorithm: token_bucket, rate: 1/h, burst: 100}
`)
			rlsDir := filepath.Join(dir, "rls")
			mkdir(t, rlsDir)
			writeFile(t, filepath.Join(rlsDir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 50}\n")
			var ps []*proc
			for range 3 {
				ps = append(ps, start(t, nil, "--store", "redis", "--redis-addrs", addrs, "--redis-mode", mode,
					"--redis-prefix", prefix, "--policy", policy, "--rls", rlsDir,
					// Generous: this test is about exactness, on a busy machine.
					"--redis-timeout", "5s"))
			}
			var admitted, refused, rlsOK, rlsOver atomic.Int64
			var wg sync.WaitGroup
			for g := range 12 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p := ps[g%3]
					c := rlsClient(t, p.addrs["grpc"])
					for range 25 {
						switch get(t, p.url("gateway", "/")).status {
						case 200:
							admitted.Add(1)
						case 429:
							refused.Add(1)
						}
						r, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{descriptor("tenant", "acme")}})
						if err != nil {
							t.Error(err)
							return
						}
						if r.OverallCode == rlspb.RateLimitResponse_OK {
							rlsOK.Add(1)
						} else {
							rlsOver.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if admitted.Load() != 100 || refused.Load() != 200 {
				t.Errorf("gateways: %d admitted, %d refused of 300; want exactly 100 admitted", admitted.Load(), refused.Load())
			}
			if rlsOK.Load() != 50 || rlsOver.Load() != 250 {
				t.Errorf("RLS: %d OK, %d over limit of 300; want exactly 50 OK", rlsOK.Load(), rlsOver.Load())
			}
			for _, p := range ps {
				if r := get(t, p.url("admin", "/readyz")); r.status != 200 {
					t.Errorf("/readyz on Redis: %d %s", r.status, r.body)
				}
			}
		})
	}
}

// TestReadyzWithoutRedis: a sluice whose Redis does not answer is alive
// but not ready.
func TestReadyzWithoutRedis(t *testing.T) {
	p := start(t, nil, "--store", "redis", "--redis-addrs", "127.0.0.1:1")
	if r := get(t, p.url("admin", "/healthz")); r.status != 200 {
		t.Errorf("/healthz: %d", r.status)
	}
	if r := get(t, p.url("admin", "/readyz")); r.status != 503 || !contains(r.body, "the store does not answer") {
		t.Errorf("/readyz: %d %s", r.status, r.body)
	}
}

// TestRLSRuntimeOverrides: an override set through the admin API names an
// RLS rate limit by its name and a descriptor's last value: scale 5 lets
// acme through 10 of 12 over gRPC while other gets 2 of 3; a value spelled
// otherwise gets the file's limit; a name neither the policy nor the RLS
// has is 404, a negative scale, bad JSON or a limit of another algorithm
// 400.
func TestRLSRuntimeOverrides(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "edge.yaml"), `domain: edge
descriptors:
  - key: tenant
    rate_limit: {name: per_tenant, unit: hour, requests_per_unit: 2}
`)
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, tokens, "admin-s3cret\n")
	p := start(t, nil, "--rls", dir, "--auth-tokens", tokens)
	for _, put := range []struct {
		path, body string
		want       int
	}{
		{"/admin/overrides/per_tenant/acme", `{"scale": -1}`, 400},
		{"/admin/overrides/per_tenant/acme", `{"scale": 5`, 400},
		{"/admin/overrides/per_tenant/acme", `{"limit": {"algorithm": "token_bucket", "rate": "1/s", "burst": 5}}`, 400},
		{"/admin/overrides/per_nobody/acme", `{"scale": 5}`, 404},
		{"/admin/overrides/per_tenant/acme", `{"scale": 5}`, 200},
	} {
		if r := do(t, "PUT", p.url("admin", put.path), put.body, "Authorization", "Bearer admin-s3cret"); r.status != put.want {
			t.Fatalf("PUT %s %s: %d %s, want %d", put.path, put.body, r.status, r.body, put.want)
		}
	}
	c := rlsClient(t, p.addrs["grpc"])
	ok := func(n int, tenant string) (got int) {
		for range n {
			r, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{descriptor("tenant", tenant)}})
			if err != nil {
				t.Fatal(err)
			}
			if r.OverallCode == rlspb.RateLimitResponse_OK {
				got++
			}
		}
		return got
	}
	for _, c := range []struct {
		tenant string
		n, ok  int
	}{{"acme", 12, 10}, {"other", 3, 2}, {"Acme", 3, 2}, {"acme ", 3, 2}, {"ac%6De", 3, 2}} {
		if got := ok(c.n, c.tenant); got != c.ok {
			t.Errorf("tenant %q: %d of %d OK, want %d", c.tenant, got, c.n, c.ok)
		}
	}
}
