package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// TestSoak is opt-in: SLUICE_SOAK=5m go test -run TestSoak -v ./httplimit
// runs steady load through the middleware on a real HTTP server for the
// given time in all, half on memstore and half on Redis. Each client
// address is new to the store most of the time (a million of them, sent
// through a trusted proxy's X-Forwarded-For), so memstore evicts
// constantly (a per-ip window of a minute holds each key far longer than
// the 20,000-key budget lasts); a few hot clients are refused most of the
// time, so refusals are logged constantly. Every 5 seconds (more often in a
// short run) it samples the live heap and the goroutines; after a warm-up (a quarter of the run, at most 30 s) neither
// may exceed its warm-up maximum by more than the slack: 50% + 4 MiB of
// heap, 10 goroutines.
func TestSoak(t *testing.T) {
	length := os.Getenv("SLUICE_SOAK")
	if length == "" && os.Getenv("CI") != "" {
		length = "20s" // CI runs it briefly rather than not at all
	}
	if length == "" {
		t.Skip("opt-in: SLUICE_SOAK=5m runs it for 5 minutes (./scripts/test runs it for 20s)")
	}
	total, err := time.ParseDuration(length)
	if err != nil || total < 20*time.Second {
		t.Fatalf("SLUICE_SOAK=%q: want a duration of at least 20s", length)
	}
	t.Run("memstore", func(t *testing.T) {
		mem, err := memstore.New(memstore.Config{MaxKeys: 20_000})
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		soak(t, mem, total/2)
	})
	t.Run("redisstore", func(t *testing.T) {
		red, err := redisstore.New(redistest.Standalone(t), redisstore.Config{Prefix: redistest.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer red.Close()
		soak(t, red, total/2)
	})
}

type soakSample struct {
	at         time.Duration
	heap       uint64
	goroutines int
	requests   int64
}

func soak(t *testing.T, store sluice.Store, d time.Duration) {
	const (
		workers   = 4
		perWorker = 500 // requests per second
		heapSlack = 2 << 20
		goSlack   = 10
	)
	clientIP := &httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	mw, err := httplimit.New(sluice.New(store), httplimit.Config{
		Limits: []httplimit.Limit{
			{Name: "per-ip", Key: httplimit.ByIP(clientIP), Limit: sluice.FixedWindow(5, time.Minute)},
			{Name: "per-user", Key: httplimit.ByHeader("X-User"), Limit: sluice.TokenBucket(sluice.PerSecond(20), 20)},
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var requests, admitted, refused, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / perWorker)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				n := requests.Add(1)
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
				if n%10 == 0 { // a hot client, mostly refused
					req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", w))
					req.Header.Set("X-User", "hot")
				} else { // a client new to the store most of the time
					req.Header.Set("X-Forwarded-For", fmt.Sprintf("11.%d.%d.%d", n>>16&15, n>>8&255, n&255))
					req.Header.Set("X-User", "user-"+strings.Repeat("u", int(n%300)))
				}
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
					}
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					admitted.Add(1)
				case 429:
					refused.Add(1)
				default:
					failed.Add(1)
				}
			}
		}()
	}

	start := time.Now()
	warmup := min(d/4, 30*time.Second)
	sampleEvery := min(5*time.Second, warmup/3)
	var samples []soakSample
	tick := time.NewTicker(sampleEvery)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			samples = append(samples, soakSample{time.Since(start), liveHeap(), runtime.NumGoroutine(), requests.Load()})
		}
	}
	tick.Stop()
	wg.Wait()

	// After the warm-up, the second half of the samples may not exceed the
	// first half's maximum by more than the slack: a leak grows without end,
	// a bounded store levels off (memstore fills its key budget early).
	var after []soakSample
	var report strings.Builder
	for _, s := range samples {
		fmt.Fprintf(&report, "\n  %6s  heap %6.2f MiB  goroutines %3d  requests %7d", s.at.Round(time.Second), float64(s.heap)/(1<<20), s.goroutines, s.requests)
		if s.at > warmup {
			after = append(after, s)
		}
	}
	if len(after) < 2 {
		t.Fatalf("%d samples after the warm-up", len(after))
	}
	first, second := after[:len(after)/2], after[len(after)/2:]
	var firstHeap, secondHeap uint64
	var firstGo, secondGo int
	for _, s := range first {
		firstHeap, firstGo = max(firstHeap, s.heap), max(firstGo, s.goroutines)
	}
	for _, s := range second {
		secondHeap, secondGo = max(secondHeap, s.heap), max(secondGo, s.goroutines)
	}
	t.Logf("%s: %d requests (%d admitted, %d refused, %d failed); after a warm-up of %s, heap max %.2f then %.2f MiB, goroutines max %d then %d%s",
		d, requests.Load(), admitted.Load(), refused.Load(), failed.Load(), warmup,
		float64(firstHeap)/(1<<20), float64(secondHeap)/(1<<20), firstGo, secondGo, report.String())
	if secondHeap > firstHeap+firstHeap/4+heapSlack {
		t.Errorf("the heap grew from %.2f to %.2f MiB, more than 25%% + %d MiB", float64(firstHeap)/(1<<20), float64(secondHeap)/(1<<20), heapSlack>>20)
	}
	if secondGo > firstGo+goSlack {
		t.Errorf("goroutines grew from %d to %d, more than %d", firstGo, secondGo, goSlack)
	}
	if failed.Load() > 0 {
		t.Errorf("%d requests failed", failed.Load())
	}
	if refused.Load() == 0 || admitted.Load() == 0 {
		t.Errorf("the load was not mixed: %d admitted, %d refused", admitted.Load(), refused.Load())
	}
}
