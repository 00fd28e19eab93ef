//go:build servebench

package bench_test

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestServeLoadLeases measures the latency the gateway adds on a hot
// global limit with the memory store, with Redis, and with Redis and
// quota leases, and the Redis calls each request costs: script calls
// (FCALL, EVALSHA), and every command INFO commandstats counts but INFO,
// those scripts run included. Run it with
//
//	cd bench && go test -tags servebench -run TestServeLoadLeases -v -count=1 -timeout 14m .
//
// The three gateways run side by side. Each round sends its requests
// directly and through each gateway in turn, starting the turn one place
// further every round, so that noise falls on all alike; SLUICE_LOAD_ROUNDS
// sets the rounds (default 5). Besides each gateway's added p99 over the
// direct call of the same round, it reports what Redis adds over the
// memory store through the same HTTP hop: the added p99 with Redis or with
// leases over the memory store's (whole run, and the median of the rounds).
// SLUICE_LOAD_PROFILE=DIR saves a CPU profile of each gateway over the
// rounds, SLUICE_LOAD_TRACE=DIR an execution trace of each gateway's first
// second in each round (go tool trace -pprof=sched shows where its
// goroutines waited to run).
func TestServeLoadLeases(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// 1,000 requests a second from 8 clients, as TestServeLoadGateway.
	const per, c, rate = 2000, 8, 1000.0
	rounds := 5
	if v, err := strconv.Atoi(os.Getenv("SLUICE_LOAD_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	upAddr := freeAddr(t)
	startProc(t, []string{"SLUICE_LOAD_UPSTREAM=" + upAddr, "SLUICE_LOAD_UPSTREAM_DELAY=0s"}, exe)
	waitDial(t, upAddr)
	redisAddr, _ := startRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	direct := &gatewayCase{store: "direct", url: "http://" + upAddr + "/"}
	cases := []*gatewayCase{direct}
	for _, store := range []string{"memory", "redis", "redis+leases"} {
		gateway, admin := startSluiceGlobal(t, "http://"+upAddr, redisAddr, store)
		cases = append(cases, &gatewayCase{store: store, url: "http://" + gateway + "/", admin: admin, by: map[string]int64{}})
	}
	for _, g := range cases {
		latencies(t, g.url, 1000, c, rate) // warm up
	}
	for _, g := range cases[1:] {
		g.rt0 = runtimeView(t, g.admin)
		if dir := os.Getenv("SLUICE_LOAD_PROFILE"); dir != "" {
			d := time.Duration(rounds*len(cases)) * per * time.Second / rate
			go fetch(t, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", g.admin, int(d.Seconds())), filepath.Join(dir, "gateway-"+g.store+".pprof"))
		}
	}
	for r := range rounds {
		for k := range cases {
			cases[(r+k)%len(cases)].round(t, rdb, per, c, rate)
		}
		for _, g := range cases[1:] {
			g.compare(direct, cases[1])
		}
	}
	for _, g := range cases[1:] {
		g.report(t, direct, cases[1], c, rate)
	}
}

// gatewayCase is one way of calling the upstream (directly, or through a
// gateway with one store) and what its rounds measured.
type gatewayCase struct {
	store      string
	url, admin string // admin is "" for direct calls
	rt0        gatewayRuntime

	last, all []time.Duration // the latest round's latencies; every round's
	cmds      int64           // Redis commands during its rounds
	by        map[string]int64
	// per round: p99 over direct's; added p99 (over direct's) over the
	// memory store's, in rounds where the memory store's was above 0; p99
	// over the memory store's (the same HTTP hop, whatever direct did)
	vsDirect, vsMemory, viaMemory []float64
}

// round sends per requests through g at rate from c clients, counting the
// Redis commands run meanwhile.
func (g *gatewayCase) round(t *testing.T, rdb *redis.Client, per, c int, rate float64) {
	before, beforeBy := commands(t, rdb)
	if dir := os.Getenv("SLUICE_LOAD_TRACE"); dir != "" && g.admin != "" {
		go fetch(t, fmt.Sprintf("http://%s/debug/pprof/trace?seconds=1", g.admin), filepath.Join(dir, fmt.Sprintf("gateway-%s-%d.trace", g.store, len(g.all)/per)))
	}
	g.last = latencies(t, g.url, per, c, rate)
	after, afterBy := commands(t, rdb)
	g.all = append(g.all, g.last...)
	if g.by != nil {
		g.cmds += after - before
		for name, v := range afterBy {
			g.by[name] += v - beforeBy[name]
		}
	}
}

// compare records the latest round's ratios against direct calls and the
// memory store.
func (g *gatewayCase) compare(direct, memory *gatewayCase) {
	d99 := pct(direct.last, .99)
	g.vsDirect = append(g.vsDirect, float64(pct(g.last, .99))/float64(d99))
	g.viaMemory = append(g.viaMemory, float64(pct(g.last, .99))/float64(pct(memory.last, .99)))
	if m := pct(memory.last, .99) - d99; m > 0 {
		g.vsMemory = append(g.vsMemory, float64(pct(g.last, .99)-d99)/float64(m))
	}
}

// report logs what g's rounds measured.
func (g *gatewayCase) report(t *testing.T, direct, memory *gatewayCase, c int, rate float64) {
	t.Helper()
	d, v, m := sorted(direct.all), sorted(g.all), sorted(memory.all)
	waits, take := adminView(t, g.admin)
	rt := runtimeView(t, g.admin).since(g.rt0, len(v))
	added99, memAdded99 := pct(v, .99)-pct(d, .99), pct(m, .99)-pct(d, .99)
	t.Logf("hot global token_bucket, store=%s, clients=%d rate=%.0f/s requests=%d: direct p50 %s p99 %s | via sluice p50 %s p99 %s p99.9 %s | added p50 %s p99 %s (p99 +%.0f%% over direct; per round %s) | added p99 over the memory store's %.2fx (%s over its %s; per round %s) | p99 over the memory store's %.2fx (per round %s) | script calls per request %.4f | Redis commands per request, scripts' own included, %.4f (%d: %s) | requests that waited for a lease call made for others, since start: %s | the store's take, since start: %s | the gateway process over the rounds: %s",
		g.store, c, rate, len(v), usText(pct(d, .5)), usText(pct(d, .99)), usText(pct(v, .5)), usText(pct(v, .99)), usText(pct(v, .999)),
		usText(pct(v, .5)-pct(d, .5)), usText(added99), 100*(float64(pct(v, .99))/float64(pct(d, .99))-1), spread(g.vsDirect, true),
		float64(added99)/float64(memAdded99), usText(added99), usText(memAdded99), spread(g.vsMemory, false),
		float64(pct(v, .99))/float64(pct(m, .99)), spread(g.viaMemory, false),
		float64(serveScriptCalls(g.by))/float64(len(v)), float64(g.cmds)/float64(len(v)), g.cmds, diff(nil, g.by), waits, take, rt)
}

// sorted returns a sorted copy of xs.
func sorted[T cmp.Ordered](xs []T) []T {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs
}

// spread describes ratios: their median and range, as percentages over 1
// if pct, else as factors.
func spread(ratios []float64, pct bool) string {
	if len(ratios) == 0 {
		return "none"
	}
	r := sorted(ratios)
	if pct {
		return fmt.Sprintf("median %+.0f%%, range %+.0f%% to %+.0f%%", 100*(r[len(r)/2]-1), 100*(r[0]-1), 100*(r[len(r)-1]-1))
	}
	return fmt.Sprintf("median %.2fx, range %.2fx to %.2fx, %d rounds", r[len(r)/2], r[0], r[len(r)-1], len(r))
}

// startSluiceGlobal starts sluice serve with one rule, a global token
// bucket no request exhausts, so every request checks one hot key; store
// is memory, redis or redis+leases.
func startSluiceGlobal(t *testing.T, upstream, redisAddr, store string) (gateway, admin string) {
	t.Helper()
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	os.WriteFile(policy, []byte(`
rules:
  - name: all
    limits:
      - {name: everyone, key: global, algorithm: token_bucket, rate: 1000000/s, burst: 1000000}
`), 0o644)
	config := filepath.Join(dir, "config.yaml")
	cfg := "store:\n  type: memory\n"
	if store != "memory" {
		cfg = fmt.Sprintf("store:\n  type: redis\n  redis:\n    addrs: [%s]\n    timeout: 1s\n    leases: {enabled: %v}\n",
			redisAddr, store == "redis+leases")
	}
	os.WriteFile(config, []byte(cfg), 0o644)
	gateway, admin = freeAddr(t), freeAddr(t)
	startProc(t, []string{"GOMAXPROCS=" + strconv.Itoa(runtime.NumCPU())}, sluiceBinary(t),
		"serve", "--config", config, "--gateway", gateway, "--api", "", "--grpc", "", "--admin", admin, "--pprof",
		"--upstream", upstream, "--policy", policy, "--log-level", "warn")
	waitDial(t, gateway)
	return gateway, admin
}

// adminView reads the metrics of the admin listener admin: the requests
// that waited for a lease call (sluice_lease_waits_total, "-" without
// leases), and the tail of the store's take (sluice_store_duration_seconds):
// the share of calls over 250 µs, 1 ms and 5 ms, so that what the store
// adds shows apart from the HTTP path and the machine's noise.
func adminView(t *testing.T, admin string) (waits, take string) {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	waits = "-"
	le := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "sluice_lease_waits_total "); ok {
			waits = v
		}
		if rest, ok := strings.CutPrefix(line, `sluice_store_duration_seconds_bucket{op="take",le="`); ok {
			bound, v, _ := strings.Cut(rest, `"} `)
			le[bound], _ = strconv.ParseFloat(v, 64)
		}
	}
	n := le["+Inf"]
	over := func(b string) float64 { return 100 * (n - le[b]) / n }
	return waits, fmt.Sprintf("%.0f calls, %.2f%% over 250 µs, %.2f%% over 1 ms, %.2f%% over 5 ms", n, over("0.00025"), over("0.001"), over("0.005"))
}

// commands returns how many commands Redis has run, INFO aside, in all
// and by command.
func commands(t *testing.T, rdb *redis.Client) (int64, map[string]int64) {
	t.Helper()
	by := map[string]int64{}
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := sc.Text() // cmdstat_fcall:calls=12,usec=...
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseInt(calls, 10, 64)
		n += v
		by[strings.TrimPrefix(name, "cmdstat_")] = v
	}
	return n, by
}

// serveScriptCalls is how many script and function calls by were.
func serveScriptCalls(by map[string]int64) int64 {
	return by["fcall"] + by["fcall_ro"] + by["evalsha"] + by["eval"]
}

// diff is what each command of after ran since before.
func diff(before, after map[string]int64) string {
	var out []string
	for name, v := range after {
		if d := v - before[name]; d > 0 {
			out = append(out, fmt.Sprintf("%s %d", name, d))
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// gatewayRuntime is what the gateway's Go runtime reports on /metrics:
// the GC cycles and the sum of their stop-the-world pauses, allocations,
// CPU time and goroutines, so that a tail from the process around the
// store (collections, allocation, background goroutines) shows apart
// from the store's own time.
type gatewayRuntime struct {
	gcs, pause, mallocs, bytes, cpu, goroutines float64
}

// runtimeView scrapes the gateway's runtime metrics from admin.
func runtimeView(t *testing.T, admin string) gatewayRuntime {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r gatewayRuntime
	fields := map[string]*float64{
		"go_gc_duration_seconds_count": &r.gcs, "go_gc_duration_seconds_sum": &r.pause,
		"go_memstats_mallocs_total": &r.mallocs, "go_memstats_alloc_bytes_total": &r.bytes,
		"process_cpu_seconds_total": &r.cpu, "go_goroutines": &r.goroutines,
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if p := fields[name]; ok && p != nil {
			*p, _ = strconv.ParseFloat(v, 64)
		}
	}
	return r
}

// since describes what the gateway did between before and r, over n
// requests: GC cycles and pauses, allocations and CPU per request, and
// the goroutines it ended with.
func (r gatewayRuntime) since(before gatewayRuntime, n int) string {
	gcs := r.gcs - before.gcs
	return fmt.Sprintf("%.0f GCs (one per %.0f requests), STW pauses %.2f ms in all, %.1f allocations and %.0f bytes per request, CPU %.1f µs per request, %.0f goroutines",
		gcs, float64(n)/max(gcs, 1), 1000*(r.pause-before.pause), (r.mallocs-before.mallocs)/float64(n),
		(r.bytes-before.bytes)/float64(n), 1e6*(r.cpu-before.cpu)/float64(n), r.goroutines)
}

// fetch saves what url answers in path (a profile or a trace).
func fetch(t *testing.T, url, path string) {
	resp, err := http.Get(url)
	if err != nil {
		t.Log(err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Log(err)
		return
	}
	defer f.Close()
	io.Copy(f, resp.Body)
}
