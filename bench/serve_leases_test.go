//go:build servebench

package bench_test

import (
	"bufio"
	"context"
	"fmt"
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
// global limit with Redis, without and with quota leases, and the Redis
// calls each request costs: script calls (FCALL, EVALSHA), and every
// command INFO commandstats counts but INFO, those scripts run included.
// Run it with
//
//	cd bench && go test -tags servebench -run TestServeLoadLeases -v -count=1 -timeout 14m .
//
// SLUICE_LOAD_ROUNDS sets the rounds of each case (default 3), alternated
// with direct calls so that noise falls on both alike.
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
	for _, store := range []string{"memory", "redis", "redis+leases"} {
		gateway, admin := startSluiceGlobal(t, "http://"+upAddr, redisAddr, store)
		latencies(t, "http://"+upAddr+"/", 1000, c, rate)
		latencies(t, "http://"+gateway+"/", 1000, c, rate)
		var direct, via []time.Duration
		var ratios []float64 // per round: p99 via / p99 direct
		before, beforeBy := commands(t, rdb)
		for range rounds {
			d := latencies(t, "http://"+upAddr+"/", per, c, rate)
			v := latencies(t, "http://"+gateway+"/", per, c, rate)
			ratios = append(ratios, float64(pct(v, .99))/float64(pct(d, .99)))
			direct, via = append(direct, d...), append(via, v...)
		}
		after, afterBy := commands(t, rdb)
		waits, take := adminView(t, admin)
		slices.Sort(direct)
		slices.Sort(via)
		slices.Sort(ratios)
		t.Logf("hot global token_bucket, store=%s, clients=%d rate=%.0f/s requests=%d: direct p50 %s p99 %s | via sluice p50 %s p99 %s | added p50 %s p99 %s (p99 +%.0f%%; per round, median +%.0f%%, range %+.0f%% to %+.0f%%) | script calls per request %.4f | Redis commands per request, scripts' own included, %.4f (%d: %s) | requests that waited for a lease call made for others, since start: %s | the store's take, since start: %s",
			store, c, rate, len(via), usText(pct(direct, .5)), usText(pct(direct, .99)), usText(pct(via, .5)), usText(pct(via, .99)),
			usText(pct(via, .5)-pct(direct, .5)), usText(pct(via, .99)-pct(direct, .99)),
			100*(float64(pct(via, .99))/float64(pct(direct, .99))-1),
			100*(ratios[len(ratios)/2]-1), 100*(ratios[0]-1), 100*(ratios[len(ratios)-1]-1),
			float64(serveScriptCalls(afterBy)-serveScriptCalls(beforeBy))/float64(len(via)),
			float64(after-before)/float64(len(via)), after-before, diff(beforeBy, afterBy), waits, take)
	}
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
		"serve", "--config", config, "--gateway", gateway, "--api", "", "--grpc", "", "--admin", admin,
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
