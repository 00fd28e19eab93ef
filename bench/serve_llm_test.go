//go:build servebench

package bench_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/llmtest"
)

// llmPolicy gives each X-Tenant a budget of tokens a day; plainPolicy
// checks a request limit only, for the cost of the proxy without the
// token metering.
const (
	llmPolicy = `
rules:
  - name: llm
    match: {methods: [POST], path: /v1/}
    limits:
      - {name: tokens, key: header:X-Tenant, algorithm: fixed_window, limit: %d, window: 1d, calendar: true, cost: {tokens: total}}
`
	plainPolicy = `
rules:
  - name: llm
    match: {methods: [POST], path: /v1/}
    limits:
      - {name: calls, key: header:X-Tenant, algorithm: fixed_window, limit: 1000000, window: 1d, calendar: true}
`
)

// llmCall is one streamed call's timing: to its first byte of body and to
// its end; status is its HTTP status.
type llmCall struct {
	first, total time.Duration
	status       int
}

// streamCalls sends n streaming chat calls at once to url (each asking for
// out tokens of a 100-token prompt), tenant(i) naming each one's tenant,
// and returns their timings. during, if set, runs once every call has its
// first byte.
func streamCalls(t *testing.T, url string, n, out int, tenant func(int) string, during func()) []llmCall {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n, DisableCompression: true}}
	body := fmt.Sprintf(`{"model":"m","max_tokens":%d,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":%q}]}`, out, strings.Repeat("word", 100))
	calls := make([]llmCall, n)
	var firsts sync.WaitGroup
	firsts.Add(n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			once := sync.OnceFunc(firsts.Done)
			defer once()
			req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("X-Tenant", tenant(i))
			t0 := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			calls[i].status = resp.StatusCode
			r := bufio.NewReader(resp.Body)
			if _, err := r.ReadByte(); err == nil {
				calls[i].first = time.Since(t0)
			}
			once()
			io.Copy(io.Discard, r)
			calls[i].total = time.Since(t0)
		})
	}
	close(start)
	firsts.Wait()
	if during != nil {
		during()
	}
	wg.Wait()
	client.CloseIdleConnections()
	return calls
}

// served returns the sorted first-byte and total times of the calls served.
func served(calls []llmCall) (first, total []time.Duration) {
	for _, c := range calls {
		if c.status == 200 {
			first, total = append(first, c.first), append(total, c.total)
		}
	}
	slices.Sort(first)
	slices.Sort(total)
	return first, total
}

// rss returns a process's resident memory, in bytes.
func rss(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// startLLMGateway runs sluice serve on Redis with policy in front of
// upstream; it returns the gateway's URL, the process's pid and, with
// SLUICE_LOAD_PROFILE, its admin address (with /debug/pprof/).
func startLLMGateway(t *testing.T, upstream, policy string) (url string, pid int, admin string) {
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	os.WriteFile(file, []byte(policy), 0o644)
	gw := freeAddr(t)
	redisAddr, _ := startRedis(t)
	args := []string{"--admin", ""}
	if os.Getenv("SLUICE_LOAD_PROFILE") != "" {
		admin = freeAddr(t)
		args = []string{"--admin", admin, "--pprof"}
	}
	args = append([]string{"serve", "--gateway", gw, "--api", "", "--grpc", ""}, args...)
	cmd := startProc(t, nil, sluiceBinary(t), append(args,
		"--upstream", upstream, "--policy", file, "--log-level", "warn", "--store", "redis", "--redis-addrs", redisAddr, "--redis-timeout", "1s")...)
	waitDial(t, gw)
	return "http://" + gw, cmd.Process.Pid, admin
}

// profileLLM saves, with SLUICE_LOAD_PROFILE=DIR, a CPU profile of each
// gateway over d and a three-second execution trace of each (go tool trace
// -pprof=net|sync|sched shows where its goroutines waited); the rounds
// run meanwhile. It returns when the profiles are saved.
func profileLLM(t *testing.T, d time.Duration, admins map[string]string) func() {
	dir := os.Getenv("SLUICE_LOAD_PROFILE")
	if dir == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	for label, admin := range admins {
		wg.Go(func() { profile(t, admin, filepath.Join(dir, "llm-"+label+".pprof"), d) })
		wg.Go(func() {
			time.Sleep(d / 2)
			fetch(t, fmt.Sprintf("http://%s/debug/pprof/trace?seconds=3", admin), filepath.Join(dir, "llm-"+label+".trace"))
		})
	}
	return wg.Wait
}

// TestServeLLM runs 200 concurrent streaming calls (100 prompt tokens,
// 200 output tokens in 25 events 4 ms apart) directly to a stand-in LLM
// API and through sluice serve on Redis, with a token budget per tenant
// and with a plain request limit (two such gateways: what two like
// gateways differ by is the scatter the token budget's cost is read
// against): the time the gateway adds to the first token and to the whole
// stream, its memory per stream in flight, and the tokens one tenant is
// served against its budget. The gateways take turns to go first in each
// round, and each round's first-byte percentiles are compared with the
// request limit's of the same round.
func TestServeLLM(t *testing.T) {
	const (
		n      = 200
		out    = 200
		perRun = 100 + out
		budget = 100 * perRun // half the calls of one tenant
	)
	up := llmtest.New(llmtest.Config{ChunkTokens: 8, Pause: 4 * time.Millisecond})
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	tokensURL, tokensPid, tokensAdmin := startLLMGateway(t, upstream.URL, fmt.Sprintf(llmPolicy, budget))
	plainURL, plainPid, plainAdmin := startLLMGateway(t, upstream.URL, plainPolicy)
	controlURL, controlPid, _ := startLLMGateway(t, upstream.URL, plainPolicy) // the same again: what two like gateways differ by
	own := func(i int) string { return "tenant-" + strconv.Itoa(i) }           // every call its own budget: all served
	type series struct {
		label       string
		url         string
		pid         int
		first, tot  []time.Duration
		idle, peaks []int64
		p50, p99    []time.Duration // first byte, per round
		d50, d99    []time.Duration // first byte, per round, minus the request limit's
	}
	runs := []*series{{label: "direct", url: upstream.URL}, {label: "gateway, request limit", url: plainURL, pid: plainPid},
		{label: "gateway, token budget", url: tokensURL, pid: tokensPid}, {label: "gateway, request limit 2", url: controlURL, pid: controlPid}}
	streamCalls(t, tokensURL, n, out, func(i int) string { return fmt.Sprint("warm-", i) }, nil) // warm up connections
	streamCalls(t, plainURL, n, out, own, nil)
	streamCalls(t, controlURL, n, out, own, nil)
	rounds := 6
	if os.Getenv("SLUICE_LOAD_PROFILE") != "" {
		rounds = 12 // for the profiles, taken over the rounds
	}
	wait := profileLLM(t, 8*time.Second, map[string]string{"tokens": tokensAdmin, "plain": plainAdmin})
	for r := range rounds {
		gateways := runs[1:] // in turn first, so that none always runs right after another
		order := append([]*series{runs[0]}, append(slices.Clone(gateways[r%len(gateways):]), gateways[:r%len(gateways)]...)...)
		for _, s := range order {
			if s.pid != 0 {
				s.idle = append(s.idle, rss(t, s.pid))
			}
			tenant := func(i int) string { return fmt.Sprintf("r%d-%d", r, i) }
			calls := streamCalls(t, s.url, n, out, tenant, func() {
				if s.pid != 0 {
					s.peaks = append(s.peaks, rss(t, s.pid))
				}
			})
			f, tot := served(calls)
			if len(f) != n {
				t.Fatalf("%s: %d of %d calls served", s.label, len(f), n)
			}
			s.first, s.tot = append(s.first, f...), append(s.tot, tot...)
			s.p50, s.p99 = append(s.p50, pct(f, 0.5)), append(s.p99, pct(f, 0.99))
		}
		for _, s := range runs[2:] {
			s.d50, s.d99 = append(s.d50, s.p50[r]-runs[1].p50[r]), append(s.d99, s.p99[r]-runs[1].p99[r])
		}
	}
	wait()
	t.Logf("%d concurrent streaming calls x %d rounds (%d tokens each, 25 events 4 ms apart):", n, rounds, perRun)
	t.Logf("%-24s %12s %12s %12s %12s %14s", "", "first p50", "first p99", "stream p50", "stream p99", "RSS / stream")
	for _, s := range runs {
		slices.Sort(s.first)
		slices.Sort(s.tot)
		mem := "-"
		if len(s.peaks) > 0 {
			var d int64
			for i := range s.peaks {
				d += s.peaks[i] - s.idle[i]
			}
			mem = fmt.Sprintf("%.1f KiB", float64(d)/float64(len(s.peaks))/n/1024)
		}
		t.Logf("%-24s %12s %12s %12s %12s %14s", s.label, usText(pct(s.first, 0.5)), usText(pct(s.first, 0.99)), usText(pct(s.tot, 0.5)), usText(pct(s.tot, 0.99)), mem)
	}
	for _, s := range runs[2:] {
		t.Logf("first byte, %s minus request limit, per round: p50 %v (median %s), p99 %v (median %s)", s.label,
			ms(s.d50), usText(median(s.d50)), ms(s.d99), usText(median(s.d99)))
	}
	// One tenant, 200 concurrent calls against its budget of 100 calls.
	before := up.Tokens.Load()
	calls := streamCalls(t, tokensURL, n, out, func(int) string { return "one-tenant" }, nil)
	var ok, refused atomic.Int64
	for _, c := range calls {
		switch c.status {
		case 200:
			ok.Add(1)
		case 429:
			refused.Add(1)
		}
	}
	used := up.Tokens.Load() - before
	t.Logf("one tenant, %d concurrent calls of %d tokens, budget %d: %d served (%d tokens, %.2f%% of the budget), %d refused", n, perRun, budget, ok.Load(), used, 100*float64(used)/budget, refused.Load())
	if used > budget {
		t.Errorf("served %d tokens over a budget of %d (the stand-in reports the estimate: no over-spend is possible)", used, budget)
	}
}

// median returns the median of ds.
func median(ds []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2]
}

// ms renders durations in milliseconds, to 0.1.
func ms(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
	}
	return "[" + strings.Join(parts, " ") + "] ms"
}
