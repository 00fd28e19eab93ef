package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/redistest"
)

// runtimeVersion writes one version of an envoyproxy/ratelimit runtime
// tree: ROOT/VERSION/ratelimit/config/FILE, the layout of that service's
// RUNTIME_ROOT, RUNTIME_SUBDIRECTORY=ratelimit and the config application
// directory, nested and extension-less files included.
func runtimeVersion(t *testing.T, root, version string, perMinute int) {
	t.Helper()
	dir := filepath.Join(root, version, "ratelimit", "config")
	mkdir(t, filepath.Join(dir, "nested"))
	writeFile(t, filepath.Join(dir, "edge.yaml"), sprintf("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", perMinute))
	writeFile(t, filepath.Join(dir, "nested", "other"), "domain: other\ndescriptors:\n  - key: k\n    value: a*c\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
}

// swapLink points link at target atomically, as envoyproxy/ratelimit's
// deployments swap their runtime root: a new link renamed over the old.
func swapLink(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".new"
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

// TestEnvoyRuntimeSwap: sluice serve --rls on envoyproxy/ratelimit's
// runtime directory, reached through the root symlink; swapping the link
// to a new version applies the new config within a second.
func TestEnvoyRuntimeSwap(t *testing.T) {
	root := t.TempDir()
	runtimeVersion(t, root, "v1", 3)
	runtimeVersion(t, root, "v2", 7)
	current := filepath.Join(root, "current")
	swapLink(t, filepath.Join(root, "v1"), current)
	p := start(t, nil, "--rls", filepath.Join(current, "ratelimit", "config"))
	c := rlsClient(t, p.addrs["grpc"])
	limit := func(domain string, d *commonpb.RateLimitDescriptor) uint32 {
		r, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*commonpb.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Statuses[0].CurrentLimit.GetRequestsPerUnit()
	}
	if got := limit("edge", descriptor("remote_address", "a")); got != 3 {
		t.Fatalf("limit %d, want 3", got)
	}
	if got := limit("other", descriptor("k", "abbbc")); got != 1 { // nested, extension-less, middle '*'
		t.Fatalf("nested file's limit %d, want 1", got)
	}
	for i, v := range []struct {
		version string
		want    uint32
	}{{"v2", 7}, {"v1", 3}, {"v2", 7}} {
		swapped := time.Now()
		swapLink(t, filepath.Join(root, v.version), current)
		waitFor(t, "the swapped runtime root to apply", func() bool { return limit("edge", descriptor("remote_address", "a")) == v.want })
		took := time.Since(swapped)
		t.Logf("swap %d to %s applied after %v", i, v.version, took)
		if took > time.Second {
			t.Errorf("swap %d to %s applied after %v, more than a second", i, v.version, took)
		}
	}
}

// TestEnvoyEndpoints: envoyproxy/ratelimit's /json and /healthcheck on
// --rls-http, gRPC health for the name "ratelimit", and RateLimit headers
// switched off.
func TestEnvoyEndpoints(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "edge.yaml"), sprintf(edgeConfig, 1))
	p := start(t, nil, "--rls", dir, "--rls-http", "127.0.0.1:0", "--rls-response-headers=false")
	base := "http://" + p.addrs["envoy-http"]
	if p.addrs["envoy-http"] == "" {
		t.Fatal("no envoy-http listener")
	}
	req := `{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`
	r := do(t, "POST", base+"/json", req)
	if r.status != 200 || !contains(r.body, `"overallCode":"OK"`) || !contains(r.body, `"requestsPerUnit":1`) || contains(r.body, "responseHeadersToAdd") {
		t.Fatalf("first /json: %d %s", r.status, r.body)
	}
	if r = do(t, "POST", base+"/json", req); r.status != 429 || !contains(r.body, `"overallCode":"OVER_LIMIT"`) {
		t.Fatalf("second /json: %d %s", r.status, r.body)
	}
	if r = do(t, "POST", base+"/json", `{"domain": 5}`); r.status != 400 {
		t.Fatalf("bad /json: %d %s", r.status, r.body)
	}
	if r = get(t, base+"/healthcheck"); r.status != 200 || r.body != "OK" {
		t.Fatalf("/healthcheck: %d %s", r.status, r.body)
	}
	conn, err := grpc.NewClient(p.addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hr, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health of ratelimit: %v %v", hr, err)
	}
}

// TestEnvoyCheckMatchesServe: sluice check gives a directory the answer
// sluice serve --rls gives it; --strict refuses what only warns.
func TestEnvoyCheckMatchesServe(t *testing.T) {
	dup := t.TempDir()
	writeFile(t, filepath.Join(dup, "a.yaml"), "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	writeFile(t, filepath.Join(dup, "b.yaml"), "domain: edge\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	empty := t.TempDir()
	start(t, nil, "--rls", empty) // starts, as envoyproxy/ratelimit does, with no domain
	warned := filepath.Join(t.TempDir(), "warned.yaml")
	writeFile(t, warned, "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n")
	cases := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"check", dup}, 1, `domain "edge" is already defined`},
		{[]string{"serve", "--rls", dup}, 1, `is already defined in`},
		{[]string{"check", "--rls-merge-domains", dup}, 0, "ok      " + dup + ": Envoy RLS config, domain edge"},
		{[]string{"check", warned}, 0, "warning: " + warned + `:4: domain "edge": descriptor a: rate_limit.requests_per_unit: missing`},
		{[]string{"check", "--strict", warned}, 1, "INVALID " + warned},
		{[]string{"check", "--kind", "rls", empty}, 0, "warning: " + empty + ": the directory has no configuration files"},
	}
	for _, c := range cases {
		args := c.args
		if args[0] == "serve" {
			args = append(append([]string(nil), serveArgs...), args[1:]...)
		}
		cmd := execSluice(args...)
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != c.code || !strings.Contains(string(out), c.out) {
			t.Errorf("sluice %s: exit %d, output:\n%s\nwant exit %d and %q", strings.Join(c.args, " "), code, out, c.code, c.out)
		}
	}
}

// TestEnvoyPeerCounting: a refused request's hits count, under
// --rls-counting peer as envoyproxy/ratelimit counts them and under the
// default into a bounded debt, so a request that would fit what the
// admitted ones left is still refused.
func TestEnvoyPeerCounting(t *testing.T) {
	dir := t.TempDir()
	// a day's window, so that the three requests share one
	writeFile(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: day, requests_per_unit: 5}\n")
	req := `{"domain": "edge", "hitsAddend": %d, "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, 429},
		{[]string{"--rls-counting", "peer"}, 429},
		{[]string{"--rls-counting", "peer", "--rls-stop-increment"}, 429},
	} {
		p := start(t, nil, append([]string{"--rls", dir, "--rls-http", "127.0.0.1:0"}, c.args...)...)
		base := "http://" + p.addrs["envoy-http"]
		for i, hits := range []int{3, 4} {
			if r := do(t, "POST", base+"/json", sprintf(req, hits)); r.status != []int{200, 429}[i] {
				t.Fatalf("%v: request %d: %d %s", c.args, i, r.status, r.body)
			}
		}
		if r := do(t, "POST", base+"/json", sprintf(req, 2)); r.status != c.want {
			t.Errorf("%v: 2 hits after 3 admitted and 4 refused: %d, want %d (%s)", c.args, r.status, c.want, r.body)
		}
		if c.args == nil {
			continue
		}
		// as envoyproxy/ratelimit's statistics: 3 within; of the 4, 1 past
		// 80% of the limit (4) and 2 over; then 2 over
		for rng, want := range map[string]float64{"within": 3, "near": 1, "over": 4} {
			if got := metric(t, p, `sluice_rls_hits_total{limit="edge/remote_address",range="`+rng+`"}`); got != want {
				t.Errorf("%v: %s hits %v, want %v", c.args, rng, got, want)
			}
		}
	}
	cmd := execSluice(append(append([]string(nil), serveArgs...), "--rls", dir, "--rls-counting", "each")...)
	if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() == 0 || !contains(string(out), "want all-or-nothing or peer") {
		t.Errorf("a bad --rls-counting: exit %d, %s", cmd.ProcessState.ExitCode(), out)
	}
}

// TestEnvoyQuotaMode: --rls-quota-mode makes every limit a quota limit,
// as envoyproxy/ratelimit's QUOTA_MODE=true: a request with one of its two
// descriptors over is admitted (429 without the flag), and refused once
// both are over.
func TestEnvoyQuotaMode(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: day, requests_per_unit: 1}\n")
	one := `{"domain": "edge", "descriptors": [{"entries": [{"key": "a", "value": "1"}]}]}`
	both := `{"domain": "edge", "descriptors": [{"entries": [{"key": "a", "value": "1"}]}, {"entries": [{"key": "b", "value": "1"}]}]}`
	for _, c := range []struct {
		args []string
		want []int // both descriptors, after a has been spent: twice
	}{
		{nil, []int{429, 429}},
		{[]string{"--rls-quota-mode"}, []int{200, 429}},
	} {
		p := start(t, nil, append([]string{"--rls", dir, "--rls-http", "127.0.0.1:0"}, c.args...)...)
		base := "http://" + p.addrs["envoy-http"]
		if r := do(t, "POST", base+"/json", one); r.status != 200 {
			t.Fatalf("%v: the first request: %d %s", c.args, r.status, r.body)
		}
		for i, want := range c.want {
			if r := do(t, "POST", base+"/json", both); r.status != want {
				t.Errorf("%v: request %d with both descriptors: %d, want %d (%s)", c.args, i+1, r.status, want, r.body)
			}
		}
	}
}

// TestEnvoyJSONStoreFailure: /json answers 400 when the store cannot
// decide, as envoyproxy/ratelimit's handler answers every error of the
// call, with the reason in the body.
func TestEnvoyJSONStoreFailure(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "edge.yaml"), sprintf(edgeConfig, 5))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	p := start(t, nil, "--rls", dir, "--rls-http", "127.0.0.1:0", "--store", "redis", "--redis-addrs", dead, "--redis-on-error", "closed")
	r := do(t, "POST", "http://"+p.addrs["envoy-http"]+"/json", `{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`)
	if r.status != 400 || !contains(r.body, "Bad Request") || !contains(r.body, "store") {
		t.Fatalf("/json with the store down: %d %s", r.status, r.body)
	}
}

// TestEnvoyHealthyWithConfig: with --rls-healthy-with-config, /healthcheck
// answers 500 and the gRPC health of "ratelimit" NOT_SERVING while no
// domain is loaded, and recover when a config file arrives, as
// envoyproxy/ratelimit's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED.
func TestEnvoyHealthyWithConfig(t *testing.T) {
	dir := t.TempDir()
	p := start(t, nil, "--rls", dir, "--rls-http", "127.0.0.1:0", "--rls-healthy-with-config")
	conn, err := grpc.NewClient(p.addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := func() (int, healthpb.HealthCheckResponse_ServingStatus) {
		hr, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
		if err != nil {
			t.Fatal(err)
		}
		return get(t, "http://"+p.addrs["envoy-http"]+"/healthcheck").status, hr.Status
	}
	if code, st := health(); code != 500 || st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("no domain loaded: /healthcheck %d, gRPC %s", code, st)
	}
	writeFile(t, filepath.Join(dir, "edge.yaml"), sprintf(edgeConfig, 5))
	waitFor(t, "a loaded domain to make sluice healthy", func() bool {
		code, st := health()
		return code == 200 && st == healthpb.HealthCheckResponse_SERVING
	})
}

// TestEnvoyTokenPattern: Envoy's token limiting through sluice serve --rls,
// over gRPC, on the memory store and on Redis: each call checks with
// hits_addend 0 when it starts and sends the tokens it used (300) when its
// stream ends, ignoring that answer. With 1,000 tokens an hour,
// envoyproxy/ratelimit admits 4 calls; both countings admit 4.
func TestEnvoyTokenPattern(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ai.yaml"), "domain: ai\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n")
	redis := []string{"--store", "redis", "--redis-addrs", redistest.Standalone(t).Options().Addr, "--redis-prefix", redistest.Prefix(t)}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"memory", nil},
		{"memory peer", []string{"--rls-counting", "peer"}},
		{"redis", redis},
		{"redis peer", append([]string{"--rls-counting", "peer"}, redis...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := start(t, nil, append([]string{"--rls", dir}, c.args...)...)
			client := rlsClient(t, p.addrs["grpc"])
			ask := func(hits uint64) rlspb.RateLimitResponse_Code {
				d := descriptor("user", c.name)
				d.HitsAddend = wrapperspb.UInt64(hits)
				resp, err := client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "ai", Descriptors: []*commonpb.RateLimitDescriptor{d}})
				if err != nil {
					t.Fatal(err)
				}
				return resp.OverallCode
			}
			admitted := 0
			for range 8 {
				if ask(0) == rlspb.RateLimitResponse_OK {
					admitted++
					ask(300)
				}
			}
			if admitted != 4 {
				t.Errorf("%d calls of 300 tokens admitted under 1,000 an hour, want 4 as envoyproxy/ratelimit", admitted)
			}
		})
	}
}

// TestEnvoyRequestBounds: the RLS request bounds are settings, by flag,
// environment variable or config file, checked at start.
func TestEnvoyRequestBounds(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "edge.yaml"), sprintf(edgeConfig, 100))
	conf := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, conf, "envoy:\n  max_length: 2000\n")
	three := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{
		descriptor("remote_address", "a"), descriptor("remote_address", "b"), descriptor("remote_address", "c")}}
	long := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{descriptor("remote_address", strings.Repeat("1", 1500))}}
	p := start(t, []string{"SLUICE_RLS_MAX_DESCRIPTORS=2"}, "--rls", dir, "--config", conf, "--rls-max-entries", "4")
	client := rlsClient(t, p.addrs["grpc"])
	if _, err := client.ShouldRateLimit(context.Background(), three); status.Code(err) != codes.InvalidArgument || !contains(err.Error(), "3 descriptors, more than 2") {
		t.Errorf("3 descriptors under SLUICE_RLS_MAX_DESCRIPTORS=2: %v", err)
	}
	if _, err := client.ShouldRateLimit(context.Background(), long); err != nil {
		t.Errorf("a value of 1,500 bytes under envoy.max_length 2000: %v", err)
	}
	five := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{descriptor("a", "1", "b", "2", "c", "3", "d", "4", "e", "5")}}
	if _, err := client.ShouldRateLimit(context.Background(), five); status.Code(err) != codes.InvalidArgument || !contains(err.Error(), "5 entries, more than 4") {
		t.Errorf("5 entries under --rls-max-entries 4: %v", err)
	}
	for _, args := range [][]string{{"--rls-max-descriptors", "1025"}, {"--rls-max-length", "-1"}, {"--rls-max-entries", "x"}} {
		cmd := execSluice(append(append([]string(nil), serveArgs...), append([]string{"--rls", dir}, args...)...)...)
		if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() == 0 || !contains(string(out), args[0]) && !contains(string(out), "envoy.max_") {
			t.Errorf("%v: exit %d, %s", args, cmd.ProcessState.ExitCode(), out)
		}
	}
}
