//go:build servebench

// The load test of sluice serve: real processes on loopback, bounded in
// requests and time. Run it with
//
//	cd bench && go test -tags servebench -run TestServeLoad -v -timeout 30m .
//
// It builds cmd/sluice, starts an upstream process (this test binary
// re-executed), sluice serve and, for the Redis cases, a redis-server of
// its own (REDISBENCH_SERVER, default redis-server on PATH), and prints:
// the latency the gateway adds over calling the upstream directly (p50,
// p99), and decision API and Envoy RLS decisions per second with the CPU
// sluice (and Redis) spent per decision. BENCH.md in bench/ records runs.
package bench_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The upstream: when this test binary runs with SLUICE_LOAD_UPSTREAM set,
// it only serves HTTP on that address, answering after the given delay.
func init() {
	addr := os.Getenv("SLUICE_LOAD_UPSTREAM")
	if addr == "" {
		return
	}
	delay, _ := time.ParseDuration(os.Getenv("SLUICE_LOAD_UPSTREAM_DELAY"))
	body := bytes.Repeat([]byte("x"), 512)
	srv := &http.Server{Addr: addr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if delay > 0 {
			time.Sleep(delay)
		}
		w.Write(body)
	})}
	fmt.Fprintln(os.Stderr, srv.ListenAndServe())
	os.Exit(1)
}

// The floor: when this test binary runs with SLUICE_LOAD_RLS_FLOOR set,
// it only serves the rate limit service on that address with a handler
// that decides nothing and answers one constant OK status, on grpc-go with
// sluice serve's server options but grpc's standard protobuf codec (and
// GOGC=400 from the environment, as sluice sets it): what the gRPC
// transport and protobuf cost per call before any service does any work.
func init() {
	addr := os.Getenv("SLUICE_LOAD_RLS_FLOOR")
	if addr == "" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := grpc.NewServer(grpc.MaxConcurrentStreams(1024), grpc.NumStreamWorkers(uint32(max(256, 32*runtime.GOMAXPROCS(0)))), grpc.SharedWriteBuffer(true))
	rlspb.RegisterRateLimitServiceServer(srv, floorRLS{})
	fmt.Fprintln(os.Stderr, srv.Serve(ln))
	os.Exit(1)
}

type floorRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
}

func (floorRLS) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{
		Code:               rlspb.RateLimitResponse_OK,
		CurrentLimit:       &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 1000000000, Unit: rlspb.RateLimitResponse_RateLimit_HOUR},
		LimitRemaining:     999999999,
		DurationUntilReset: durationpb.New(time.Hour),
	}}}, nil
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitDial(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
	}
	t.Fatalf("nothing listens on %s", addr)
}

// startProc runs a process that the test kills (by pid) when it ends.
func startProc(t *testing.T, env []string, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, stderr.String())
		}
	})
	return cmd
}

// cpu returns the user+system CPU time a process has used.
func cpu(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64) // fields 14 and 15 of stat
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

type sluiceProc struct {
	cmd       *exec.Cmd
	gateway   string
	api, grpc string
	admin     string // only with SLUICE_LOAD_PROFILE
	redisPid  int
	redisAddr string
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func sluiceBinary(t *testing.T) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-load-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "sluice")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/sluice")
		cmd.Dir = ".." // the main module, with its own go.sum
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("%v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// startRedis starts a dedicated redis-server on a free port.
func startRedis(t *testing.T) (addr string, pid int) {
	t.Helper()
	addr = freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	server := os.Getenv("REDISBENCH_SERVER")
	if server == "" {
		server = "redis-server"
	}
	cmd := startProc(t, nil, server, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	waitDial(t, addr)
	return addr, cmd.Process.Pid
}

func startSluice(t *testing.T, upstream, store string, extra ...string) *sluiceProc {
	t.Helper()
	return startSluiceBin(t, sluiceBinary(t), upstream, store, extra...)
}

// startSluiceBin is startSluice with the sluice binary bin.
func startSluiceBin(t *testing.T, bin, upstream, store string, extra ...string) *sluiceProc {
	t.Helper()
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	os.WriteFile(policy, []byte(`
rules:
  - name: all
    limits:
      - {name: per-ip, key: ip, algorithm: token_bucket, rate: 1000000/s, burst: 1000000}
`), 0o644)
	rlsDir := filepath.Join(dir, "rls")
	os.Mkdir(rlsDir, 0o755)
	os.WriteFile(filepath.Join(rlsDir, "load.yaml"), []byte(rlsLoadConfig), 0o644)
	p := &sluiceProc{gateway: freeAddr(t), api: freeAddr(t), grpc: freeAddr(t)}
	admin := ""
	if os.Getenv("SLUICE_LOAD_PROFILE") != "" {
		admin = freeAddr(t)
		p.admin = admin
	}
	args := []string{"serve", "--gateway", p.gateway, "--api", p.api, "--grpc", p.grpc, "--admin", admin, "--pprof", "--upstream", upstream,
		"--policy", policy, "--rls", rlsDir, "--log-level", "warn", "--store", store}
	if store == "redis" {
		p.redisAddr, p.redisPid = startRedis(t)
		args = append(args, "--redis-addrs", p.redisAddr, "--redis-timeout", "1s")
	}
	p.cmd = startProc(t, []string{"GOMAXPROCS=" + strconv.Itoa(runtime.NumCPU())}, bin, append(args, extra...)...)
	waitDial(t, p.gateway)
	waitDial(t, p.grpc)
	waitDial(t, p.api)
	return p
}

// latencies runs n GET requests to url at about rate per second (paced,
// open loop, from c concurrent clients, so that latency is measured below
// saturation) and returns the sorted latencies.
func latencies(t *testing.T, url string, n, c int, rate float64) []time.Duration {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c, MaxConnsPerHost: c}}
	var mu sync.Mutex
	var out []time.Duration
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	interval := time.Duration(float64(time.Second) / rate)
	begin := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, n/c+1)
			for {
				i := next.Add(1)
				if i > int64(n) {
					break
				}
				if wait := time.Until(begin.Add(time.Duration(i) * interval)); wait > 0 {
					time.Sleep(wait)
				}
				start := time.Now()
				resp, err := client.Get(url)
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
				}
				local = append(local, time.Since(start))
			}
			mu.Lock()
			out = append(out, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Errorf("%s: %d of %d requests failed or were refused", url, failed.Load(), n)
	}
	slices.Sort(out)
	return out
}

func pct(ls []time.Duration, p float64) time.Duration {
	if len(ls) == 0 {
		return 0
	}
	return ls[min(len(ls)-1, int(float64(len(ls))*p))]
}

func usText(d time.Duration) string {
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}

// TestServeLoad measures the gateway's added latency.
func TestServeLoadGateway(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// 1,000 requests a second from 8 clients: well below what this
	// machine saturates at, so that the figures are the cost of the hop,
	// not queueing.
	const n, c, rate = 15000, 8, 1000.0
	for _, delay := range []time.Duration{0, 2 * time.Millisecond} {
		upAddr := freeAddr(t)
		startProc(t, []string{"SLUICE_LOAD_UPSTREAM=" + upAddr, "SLUICE_LOAD_UPSTREAM_DELAY=" + delay.String()}, exe)
		waitDial(t, upAddr)
		for _, store := range []string{"memory", "redis"} {
			p := startSluice(t, "http://"+upAddr, store)
			// Warm up both paths, then alternate rounds so that noise
			// falls on both alike.
			latencies(t, "http://"+upAddr+"/", 1000, c, rate)
			latencies(t, "http://"+p.gateway+"/", 1000, c, rate)
			if dir := os.Getenv("SLUICE_LOAD_PROFILE"); dir != "" {
				go profile(t, p.admin, filepath.Join(dir, fmt.Sprintf("gateway-%s-%v.pprof", store, delay)), 10*time.Second)
			}
			var direct, via []time.Duration
			for range 3 {
				direct = append(direct, latencies(t, "http://"+upAddr+"/", n/3, c, rate)...)
				via = append(via, latencies(t, "http://"+p.gateway+"/", n/3, c, rate)...)
			}
			slices.Sort(direct)
			slices.Sort(via)
			t.Logf("gateway upstream-delay=%v store=%s clients=%d rate=%.0f/s requests=%d: direct p50 %s p99 %s | via sluice p50 %s p99 %s | added p50 %s p99 %s (p99 +%.0f%%)",
				delay, store, c, rate, len(via), usText(pct(direct, .5)), usText(pct(direct, .99)), usText(pct(via, .5)), usText(pct(via, .99)),
				usText(pct(via, .5)-pct(direct, .5)), usText(pct(via, .99)-pct(direct, .99)),
				100*(float64(pct(via, .99))/float64(pct(direct, .99))-1))
		}
	}
}

// TestServeLoadRLS measures Envoy RLS decisions per second with 64
// concurrent callers over 4 connections, for many distinct keys and for
// one over-limit key, on memory and Redis.
func TestServeLoadRLS(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		p := startSluice(t, "http://127.0.0.1:1", store)
		measureRLS(t, "sluice store="+store, p.grpc, p.cmd.Process.Pid, p.redisPid, p.admin)
	}
	if os.Getenv("SLUICE_LOAD_FLOOR") != "" {
		addr, pid := startFloor(t)
		measureRLS(t, "grpc-go floor (constant answer)", addr, pid, 0, "")
	}
	// envoyproxy/ratelimit on the same machine in the same session, when
	// RLS_PEER_BIN names its binary (go install
	// github.com/envoyproxy/ratelimit/src/service_cmd@latest): Redis, and
	// its local cache of over-limit keys on.
	if bin := os.Getenv("RLS_PEER_BIN"); bin != "" {
		addr, pid, redisPid := startPeer(t, bin)
		measureRLS(t, "envoyproxy/ratelimit redis+local cache", addr, pid, redisPid, "")
	}
}

const rlsLoadConfig = `
domain: load
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: hot
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: tokens
    rate_limit: {unit: hour, requests_per_unit: 1000}
`

// measureRLS drives one rate limit service with 64 concurrent callers over
// 4 connections, for many distinct keys and for one over-limit key, and
// logs decisions per second and the CPU each process spent per decision.
func measureRLS(t *testing.T, label, addr string, pid, redisPid int, admin string) {
	dur := 5 * time.Second
	if s := os.Getenv("SLUICE_LOAD_SECONDS"); s != "" {
		n, _ := strconv.Atoi(s)
		dur = time.Duration(n) * time.Second
	}
	clients := rlsClients(t, addr)
	for _, kind := range []string{"many keys", "over-limit key"} {
		rlsRound(t, clients, kind, time.Second) // warm up: connections, scripts, the near cache
		if dir := os.Getenv("SLUICE_LOAD_PROFILE"); dir != "" && admin != "" {
			go profile(t, admin, filepath.Join(dir, "rls-"+strings.ReplaceAll(label, " ", "-")+"-"+strings.ReplaceAll(kind, " ", "-")+".pprof"), dur-time.Second)
		}
		r := measureRound(t, clients, kind, dur, pid, redisPid)
		t.Logf("rls %s, %s: %s", label, kind, r)
	}
}

// rlsResult is one measured round.
type rlsResult struct {
	rate, cpu, loadCPU, redisCPU float64 // decisions/s, µs per decision
	ok, over, errs               int64
	elapsed                      time.Duration
	redis                        bool
}

func (r rlsResult) String() string {
	s := fmt.Sprintf("%.0f decisions/s (%d OK, %d over limit, %d errors) in %v; service CPU %.1f µs/decision, load generator CPU %.1f µs/decision",
		r.rate, r.ok, r.over, r.errs, r.elapsed.Round(time.Millisecond), r.cpu, r.loadCPU)
	if r.redis {
		s += fmt.Sprintf(", redis CPU %.1f µs/decision", r.redisCPU)
	}
	return s
}

func rlsClients(t *testing.T, addr string) []rlspb.RateLimitServiceClient {
	const conns = 4
	var clients []rlspb.RateLimitServiceClient
	for range conns {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		clients = append(clients, rlspb.NewRateLimitServiceClient(conn))
	}
	return clients
}

// measureRound runs one round of kind for d and measures the CPU of the
// service (pid), of its Redis (redisPid, 0 for none) and of this process.
func measureRound(t *testing.T, clients []rlspb.RateLimitServiceClient, kind string, d time.Duration, pid, redisPid int) rlsResult {
	cpu0, self0 := cpu(t, pid), cpu(t, os.Getpid())
	var rcpu0 time.Duration
	if redisPid != 0 {
		rcpu0 = cpu(t, redisPid)
	}
	start := time.Now()
	r := rlsRound(t, clients, kind, d)
	r.elapsed = time.Since(start)
	total := float64(r.ok + r.over)
	r.rate = total / r.elapsed.Seconds()
	r.cpu = float64(cpu(t, pid)-cpu0) / total / 1e3
	r.loadCPU = float64(cpu(t, os.Getpid())-self0) / total / 1e3
	if redisPid != 0 {
		r.redis, r.redisCPU = true, float64(cpu(t, redisPid)-rcpu0)/total/1e3
	}
	if r.errs > 0 {
		t.Errorf("%d errors", r.errs)
	}
	return r
}

// rlsRound calls ShouldRateLimit from 64 goroutines for d: a new user
// value each call ("many keys") or the one over-limit key.
func rlsRound(t *testing.T, clients []rlspb.RateLimitServiceClient, kind string, d time.Duration) rlsResult {
	const callers = 64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	var okN, overN, errN atomic.Int64
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[i%len(clients)]
			for time.Now().Before(stop) {
				var desc *commonpb.RateLimitDescriptor
				if kind == "many keys" {
					desc = &commonpb.RateLimitDescriptor{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "user", Value: strconv.FormatInt(rlsSeq.Add(1), 10)}}}
				} else {
					desc = &commonpb.RateLimitDescriptor{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "hot", Value: "h"}}}
				}
				r, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "load", Descriptors: []*commonpb.RateLimitDescriptor{desc}})
				switch {
				case err != nil:
					errN.Add(1)
				case r.OverallCode == rlspb.RateLimitResponse_OK:
					okN.Add(1)
				default:
					overN.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return rlsResult{ok: okN.Load(), over: overN.Load(), errs: errN.Load()}
}

// rlsSeq numbers the "many keys" values, so that no two calls of any
// round share one.
var rlsSeq atomic.Int64

// TestServeLoadRLSSideBySide measures sluice serve (Redis store) and
// envoyproxy/ratelimit (RLS_PEER_BIN; Redis with its local cache of
// over-limit keys), each on its own redis-server, and the grpc-go floor, in
// alternating rounds (SLUICE_LOAD_ROUNDS, default 5, of SLUICE_LOAD_SECONDS,
// default 3 s, each), so that a machine whose load drifts weighs on all of
// them alike; it logs every round and the medians, and the ratios of the
// medians. SLUICE_LOAD_BASE_BIN, if set, names another sluice binary (an
// older commit's) measured in the same rounds as "sluice base", for an A/B
// of a change; several, separated by commas, are "sluice base", "sluice
// base 2" and on.
func TestServeLoadRLSSideBySide(t *testing.T) {
	bin := os.Getenv("RLS_PEER_BIN")
	if bin == "" {
		t.Skip("RLS_PEER_BIN names no envoyproxy/ratelimit binary")
	}
	rounds, dur := 5, 3*time.Second
	if n, err := strconv.Atoi(os.Getenv("SLUICE_LOAD_ROUNDS")); err == nil {
		rounds = n
	}
	if n, err := strconv.Atoi(os.Getenv("SLUICE_LOAD_SECONDS")); err == nil {
		dur = time.Duration(n) * time.Second
	}
	type svc struct {
		label         string
		clients       []rlspb.RateLimitServiceClient
		pid, redisPid int
		results       map[string][]rlsResult
	}
	p := startSluice(t, "http://127.0.0.1:1", "redis")
	peerAddr, peerPid, peerRedis := startPeer(t, bin)
	floorAddr, floorPid := startFloor(t)
	svcs := []*svc{
		{label: "sluice", clients: rlsClients(t, p.grpc), pid: p.cmd.Process.Pid, redisPid: p.redisPid},
		{label: "envoyproxy/ratelimit", clients: rlsClients(t, peerAddr), pid: peerPid, redisPid: peerRedis},
		{label: "grpc-go floor", clients: rlsClients(t, floorAddr), pid: floorPid},
	}
	var bases []string // "sluice base", then "sluice base 2" and on
	if env := os.Getenv("SLUICE_LOAD_BASE_BIN"); env != "" {
		for i, base := range strings.Split(env, ",") {
			label := "sluice base"
			if i > 0 {
				label += " " + strconv.Itoa(i+1)
			}
			bases = append(bases, label)
			b := startSluiceBin(t, base, "http://127.0.0.1:1", "redis")
			svcs = append(svcs, &svc{label: label, clients: rlsClients(t, b.grpc), pid: b.cmd.Process.Pid, redisPid: b.redisPid})
		}
	}
	kinds := []string{"many keys", "over-limit key"}
	for _, s := range svcs {
		s.results = map[string][]rlsResult{}
		for _, kind := range kinds {
			rlsRound(t, s.clients, kind, time.Second) // warm up
		}
	}
	for i := range rounds {
		for _, kind := range kinds {
			for j := range svcs {
				s := svcs[(i+j)%len(svcs)] // a different service first each round
				r := measureRound(t, s.clients, kind, dur, s.pid, s.redisPid)
				s.results[kind] = append(s.results[kind], r)
				t.Logf("round %d, %s, %s: %s", i+1, s.label, kind, r)
			}
		}
	}
	median := func(rs []rlsResult, f func(rlsResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	for _, kind := range kinds {
		m := map[string][2]float64{}
		for _, s := range svcs {
			rate, c := median(s.results[kind], func(r rlsResult) float64 { return r.rate }), median(s.results[kind], func(r rlsResult) float64 { return r.cpu })
			m[s.label] = [2]float64{rate, c}
			t.Logf("median of %d rounds, %s, %s: %.0f decisions/s, service CPU %.1f µs/decision", rounds, s.label, kind, rate, c)
		}
		sl, pe, fl := m["sluice"], m["envoyproxy/ratelimit"], m["grpc-go floor"]
		t.Logf("%s: sluice/peer decisions/s %.2fx, CPU per decision %.2fx; floor/peer CPU %.2fx", kind, sl[0]/pe[0], sl[1]/pe[1], fl[1]/pe[1])
		for _, label := range bases {
			b := m[label]
			t.Logf("%s: %s/peer decisions/s %.2fx, CPU per decision %.2fx; sluice/%s CPU %.2fx", kind, label, b[0]/pe[0], b[1]/pe[1], label, sl[1]/b[1])
		}
	}
}

// startPeer starts envoyproxy/ratelimit from bin on its own redis-server,
// with its local cache of over-limit keys on.
func startPeer(t *testing.T, bin string) (grpcAddr string, pid, redisPid int) {
	redisAddr, redisPid := startRedis(t)
	root := t.TempDir()
	cfgDir := filepath.Join(root, "ratelimit", "config")
	os.MkdirAll(cfgDir, 0o755)
	os.WriteFile(filepath.Join(cfgDir, "load.yaml"), []byte(rlsLoadConfig), 0o644)
	grpcAddr, httpAddr, debugAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	port := func(a string) string { _, p, _ := net.SplitHostPort(a); return p }
	cmd := startProc(t, []string{
		"USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + port(grpcAddr), "HOST=127.0.0.1", "PORT=" + port(httpAddr),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + port(debugAddr), "LOCAL_CACHE_SIZE_IN_BYTES=1048576",
	}, bin)
	waitDial(t, grpcAddr)
	return grpcAddr, cmd.Process.Pid, redisPid
}

// startFloor starts the floor server (see SLUICE_LOAD_RLS_FLOOR).
func startFloor(t *testing.T) (addr string, pid int) {
	addr = freeAddr(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := startProc(t, []string{"SLUICE_LOAD_RLS_FLOOR=" + addr, "GOGC=400", "GOMAXPROCS=" + strconv.Itoa(runtime.NumCPU())}, exe)
	waitDial(t, addr)
	return addr, cmd.Process.Pid
}

// TestServeLoadAPI measures decision API checks per second with 64
// concurrent HTTP clients, many distinct keys.
func TestServeLoadAPI(t *testing.T) {
	const callers = 64
	dur := 5 * time.Second
	for _, store := range []string{"memory", "redis"} {
		p := startSluice(t, "http://127.0.0.1:1", store)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: callers}}
		run := func(d time.Duration) (n, errs int64) {
			var wg sync.WaitGroup
			stop := time.Now().Add(d)
			var seq, okN, errN atomic.Int64
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(stop) {
						body := fmt.Sprintf(`{"checks": [{"key": "u%d", "limit": {"algorithm": "token_bucket", "rate": "100/s", "burst": 100}}]}`, seq.Add(1))
						resp, err := client.Post("http://"+p.api+"/v1/check", "application/json", strings.NewReader(body))
						if err != nil {
							errN.Add(1)
							continue
						}
						var a struct{ Allowed bool }
						json.NewDecoder(bufio.NewReader(resp.Body)).Decode(&a)
						resp.Body.Close()
						if resp.StatusCode != 200 || !a.Allowed {
							errN.Add(1)
							continue
						}
						okN.Add(1)
					}
				}()
			}
			wg.Wait()
			return okN.Load(), errN.Load()
		}
		run(time.Second)
		cpu0 := cpu(t, p.cmd.Process.Pid)
		start := time.Now()
		n, errs := run(dur)
		elapsed := time.Since(start)
		t.Logf("api store=%s many keys: %.0f checks/s (%d, %d errors); sluice CPU %.1f µs/check",
			store, float64(n)/elapsed.Seconds(), n, errs, float64(cpu(t, p.cmd.Process.Pid)-cpu0)/float64(n)/1e3)
		if errs > 0 {
			t.Errorf("%d errors", errs)
		}
	}
}

// profile saves a CPU profile of sluice taken over d.
func profile(t *testing.T, admin, path string, d time.Duration) {
	fetch(t, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, int(d.Seconds())), path)
}
