package httplimit_test

import (
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// discard is a ResponseWriter that keeps only the status, so the attack
// test measures the middleware and the store, not response recording.
type discard struct {
	h      http.Header
	status int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(status int)      { d.status = status }

// TestKeyCardinalityAttack sends 2 million requests from distinct client
// addresses through the middleware on a memstore of MaxKeys 50,000, with a
// legitimate hot client interleaved every 100 requests. The live heap,
// sampled every 100,000 requests, stays within MaxKeys times the documented
// bytes per key (400, docs/operations.md) plus 16 MiB of slack for the
// runtime and the test itself; and the hot client, whose key is used
// between the eviction hand's passes, is never forgotten: it is admitted
// exactly 100 times per one-second window of the store's (fake) clock.
//
// Under the race detector it sends 200,000 requests; ./scripts/test also
// runs the full 2 million without it.
func TestKeyCardinalityAttack(t *testing.T) {
	attackers := 2_000_000
	if raceEnabled {
		attackers = 200_000
	}
	if s := envInt(t, "SLUICE_ATTACK_KEYS"); s > 0 {
		attackers = s
	}
	const (
		maxKeys     = 50_000
		bytesPerKey = 400
		slack       = 16 << 20
		hotEvery    = 100
		perWindow   = 100
		step        = 10 * time.Microsecond // fake time per request
	)
	before := liveHeap()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
	mem, err := memstore.New(memstore.Config{MaxKeys: maxKeys, Now: func() time.Time { return time.UnixMicro(now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	mw, err := httplimit.New(sluice.New(mem), httplimit.Config{
		Limits: []httplimit.Limit{{Name: "per-ip", Key: httplimit.ByIP(&httplimit.ClientIP{}), Limit: sluice.FixedWindow(perWindow, time.Second)}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	r, _ := http.NewRequest("GET", "http://example.test/", nil)
	w := &discard{h: http.Header{}}
	serve := func(remote string) int {
		r.RemoteAddr = remote
		clear(w.h)
		w.status = 0
		h.ServeHTTP(w, r)
		return w.status
	}

	var maxHeap uint64
	sample := func() {
		if heap := liveHeap(); heap > before && heap-before > maxHeap {
			maxHeap = heap - before
		}
	}
	hotAdmitted, hotWindows, lastWindow := 0, 0, int64(-1)
	base := netip.MustParseAddr("11.0.0.0").As4()
	for i := range attackers {
		now.Add(int64(step / time.Microsecond))
		a := base
		a[1], a[2], a[3] = byte(i>>16), byte(i>>8), byte(i)
		a[0] += byte(i >> 24)
		if code := serve(netip.AddrPortFrom(netip.AddrFrom4(a), 1234).String()); code != 200 {
			t.Fatalf("attacker %d, seen once, answered %d", i, code)
		}
		if i%hotEvery == 0 {
			if window := now.Load() / 1e6; window != lastWindow {
				hotWindows, lastWindow = hotWindows+1, window
			}
			if serve("198.51.100.9:443") == 200 {
				hotAdmitted++
			}
		}
		if i%100_000 == 0 {
			sample()
		}
	}
	sample()
	budget := uint64(maxKeys*bytesPerKey + slack)
	t.Logf("%d attackers: store holds %d keys; live heap at most %.1f MiB (budget %.1f MiB = %d keys × %d bytes + %d MiB); hot client admitted %d in %d windows",
		attackers, mem.Len(), float64(maxHeap)/(1<<20), float64(budget)/(1<<20), maxKeys, bytesPerKey, slack>>20, hotAdmitted, hotWindows)
	if n := mem.Len(); n > maxKeys+64 {
		t.Errorf("store holds %d keys, MaxKeys %d", n, maxKeys)
	}
	if maxHeap > budget {
		t.Errorf("live heap grew by %d bytes, budget %d", maxHeap, budget)
	}
	if want := hotWindows * perWindow; hotAdmitted != want {
		t.Errorf("hot client admitted %d times in %d windows, want exactly %d", hotAdmitted, hotWindows, want)
	}
}

func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func envInt(t *testing.T, name string) int {
	s := os.Getenv(name)
	if s == "" {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: not a number", name, s)
	}
	return n
}
