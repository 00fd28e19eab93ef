//go:build servebench

// The load shedding benchmark: sluice serve's gateway in front of an
// upstream of limited capacity, offered three times that capacity, with
// and without the policy's shed: section. Real processes on loopback,
// bounded in time (about 40 s in all). Run it with
//
//	cd bench && go test -tags servebench -run TestShedLoad -v -count=1 -timeout 5m .
//
// SHED.md records runs.
package bench_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The upstream of limited capacity: when this test binary runs with
// SLUICE_SHED_UPSTREAM set, it serves HTTP on that address; a request
// takes SLUICE_SHED_DELAY (plus up to 20% jitter) while at most
// SLUICE_SHED_CAPACITY are in flight, and n/capacity times as long when n
// are: its throughput stays capacity/delay, its latency grows with load.
func init() {
	addr := os.Getenv("SLUICE_SHED_UPSTREAM")
	if addr == "" {
		return
	}
	delay, _ := time.ParseDuration(os.Getenv("SLUICE_SHED_DELAY"))
	capacity, _ := strconv.ParseFloat(os.Getenv("SLUICE_SHED_CAPACITY"), 64)
	var inflight atomic.Int64
	srv := &http.Server{Addr: addr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		d := float64(delay) * max(1, float64(n)/capacity) * (1 + 0.2*rand.Float64())
		time.Sleep(time.Duration(d))
		w.Write([]byte("ok\n"))
	})}
	fmt.Fprintln(os.Stderr, srv.ListenAndServe())
	os.Exit(1)
}

const shedPolicy = `
trusted_proxies: [127.0.0.1]   # the load generator sets Sluice-Priority
rules:
  - name: all
    limits:
      - {name: per-ip, key: ip, algorithm: token_bucket, rate: 1000000/s, burst: 1000000}
`

// shedOutcome is one request as the load generator saw it.
type shedOutcome struct {
	class   int // 0 critical, 1 default, 2 sheddable
	status  int // 0: no answer within the client's timeout
	latency time.Duration
	start   time.Duration // since the phase began
}

var classNames = [3]string{"critical", "default", "sheddable"}

// shedOffer sends Poisson arrivals at rate per second to url for d, a tenth
// critical and the rest default and sheddable alike, each with a timeout.
func shedOffer(url string, rate float64, d, timeout time.Duration, seed uint64) []shedOutcome {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096}, Timeout: timeout}
	rng := rand.New(rand.NewPCG(seed, 3))
	var mu sync.Mutex
	var out []shedOutcome
	var wg sync.WaitGroup
	begin := time.Now()
	for next := begin; time.Since(begin) < d; {
		class := 2
		switch x := rng.Float64(); {
		case x < 0.1:
			class = 0
		case x < 0.55:
			class = 1
		}
		wg.Go(func() {
			o := shedOutcome{class: class, start: time.Since(begin)}
			req, _ := http.NewRequestWithContext(context.Background(), "GET", url, nil)
			req.Header.Set("Sluice-Priority", classNames[class])
			t0 := time.Now()
			if resp, err := client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				o.status = resp.StatusCode
			}
			o.latency = time.Since(t0)
			mu.Lock()
			out = append(out, o)
			mu.Unlock()
		})
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		time.Sleep(time.Until(next))
	}
	wg.Wait()
	client.CloseIdleConnections()
	return out
}

// shedRow summarises the requests that began after skip.
func shedRow(os []shedOutcome, skip, d time.Duration) string {
	var ok []time.Duration
	var n, good [3]int
	var refused, timeouts, total int
	for _, o := range os {
		if o.start < skip {
			continue
		}
		total++
		n[o.class]++
		switch o.status {
		case 200:
			good[o.class]++
			ok = append(ok, o.latency)
		case 0:
			timeouts++
		default:
			refused++
		}
	}
	slices.Sort(ok)
	secs := (d - skip).Seconds()
	pctl := func(p float64) string {
		if len(ok) == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f", float64(ok[min(len(ok)-1, int(float64(len(ok))*p))])/float64(time.Millisecond))
	}
	succ := func(c int) string { return fmt.Sprintf("%.1f%%", 100*float64(good[c])/float64(max(1, n[c]))) }
	return fmt.Sprintf("| %.0f/s | %s | %s | %.0f/s | %s | %s | %s | %d | %d |", float64(total)/secs, pctl(.5), pctl(.99),
		float64(len(ok))/secs, succ(0), succ(1), succ(2), refused, timeouts)
}

// TestShedLoad offers an upstream of capacity 20 at once, 200ms each
// (about 90 requests a second: few enough that a shared machine's CPU
// does not decide the figures), half its capacity for 4 s and then three
// times it for 10 s, through sluice serve with and without load shedding.
// Clients give up after 2 s, as many do; the figures skip the first 3 s of
// the overload, while the limit converges.
func TestShedLoad(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const capacity, delay = 20, 200 * time.Millisecond
	rate := capacity / (1.1 * delay.Seconds()) // the mean jitter is 10%
	t.Logf("| gateway | phase | offered | p50 ms | p99 ms | goodput | critical | default | sheddable | 503 | timeouts |")
	for _, mode := range []string{"no shedding", "shed: {}", "shed: {algorithm: gradient2}"} {
		upAddr := freeAddr(t)
		startProc(t, []string{"SLUICE_SHED_UPSTREAM=" + upAddr, "SLUICE_SHED_DELAY=" + delay.String(),
			"SLUICE_SHED_CAPACITY=" + strconv.Itoa(capacity)}, exe)
		waitDial(t, upAddr)
		policy := filepath.Join(t.TempDir(), "policy.yaml")
		text := shedPolicy
		if mode != "no shedding" {
			text = mode + "\n" + text
		}
		os.WriteFile(policy, []byte(text), 0o644)
		gw := freeAddr(t)
		startProc(t, nil, sluiceBinary(t), "serve", "--gateway", gw, "--api", "", "--grpc", "", "--admin", "",
			"--upstream", "http://"+upAddr, "--policy", policy, "--log-level", "warn")
		waitDial(t, gw)
		url := "http://" + gw + "/"
		loadavg, _ := os.ReadFile("/proc/loadavg")
		t.Logf("%s: load average %.14s", mode, loadavg)
		calm := shedOffer(url, rate/2, 4*time.Second, 2*time.Second, 1)
		t.Logf("| %s | 0.5x | %s", mode, shedRow(calm, time.Second, 4*time.Second)[1:])
		load := shedOffer(url, 3*rate, 10*time.Second, 2*time.Second, 2)
		t.Logf("| %s | 3x | %s", mode, shedRow(load, 3*time.Second, 10*time.Second)[1:])
	}
}
