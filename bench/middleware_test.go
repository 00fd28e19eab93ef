package bench

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/go-chi/httprate"
	sethvargohttp "github.com/sethvargo/go-limiter/httplimit"
	sethvargomem "github.com/sethvargo/go-limiter/memorystore"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululestdlib "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
)

// Middleware overhead: each library's net/http middleware, limiting per
// client IP (RemoteAddr) with a limit high enough that every request is
// admitted, in front of the same trivial handler, called directly with an
// httptest recorder (no network). The handler alone is the baseline; the
// overhead of a middleware is its time minus the baseline's.

// middlewares builds each library's per-IP middleware.
var middlewares = []struct {
	name  string
	build func(tb testing.TB) func(http.Handler) http.Handler
}{
	{"none", func(testing.TB) func(http.Handler) http.Handler {
		return func(h http.Handler) http.Handler { return h }
	}},
	{"sluice", func(tb testing.TB) func(http.Handler) http.Handler {
		store, err := memstore.New(memstore.Config{MaxKeys: 1 << 18})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { store.Close() })
		mw, err := httplimit.New(sluice.New(store), httplimit.Config{Limits: []httplimit.Limit{
			{Name: "per-ip", Key: httplimit.ByIP(&httplimit.ClientIP{}), Limit: sluice.TokenBucket(sluice.PerSecond(1_000_000_000), 1_000_000_000)},
		}})
		if err != nil {
			tb.Fatal(err)
		}
		return mw
	}},
	{"httprate", func(testing.TB) func(http.Handler) http.Handler {
		return httprate.Limit(1<<30, time.Hour, httprate.WithKeyFuncs(httprate.KeyByIP))
	}},
	{"ulule", func(tb testing.TB) func(http.Handler) http.Handler {
		lim := ulule.New(ululemem.NewStore(), ulule.Rate{Period: time.Hour, Limit: 1 << 30})
		return ululestdlib.NewMiddleware(lim).Handler
	}},
	{"sethvargo", func(tb testing.TB) func(http.Handler) http.Handler {
		store, err := sethvargomem.New(&sethvargomem.Config{Tokens: 1 << 30, Interval: time.Hour})
		if err != nil {
			tb.Fatal(err)
		}
		mw, err := sethvargohttp.NewMiddleware(store, sethvargohttp.IPKeyFunc())
		if err != nil {
			tb.Fatal(err)
		}
		return mw.Handle
	}},
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

// clientAddrs returns n distinct client addresses.
func clientAddrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":4711"
	}
	return out
}

// TestMiddlewaresAdmit checks every middleware admits on this path (so the
// benchmark measures the admitting path) and sluice's refuses when it should.
func TestMiddlewaresAdmit(t *testing.T) {
	for _, m := range middlewares {
		h := m.build(t)(okHandler)
		for _, addr := range clientAddrs(3) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = addr
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != 200 || w.Body.String() != "ok" {
				t.Fatalf("%s: %d %q", m.name, w.Code, w.Body.String())
			}
		}
	}
}

func BenchmarkMiddleware(b *testing.B) {
	for _, clients := range []int{1, 10_000} {
		addrs := clientAddrs(clients)
		b.Run("clients="+strconv.Itoa(clients), func(b *testing.B) {
			for _, m := range middlewares {
				b.Run("lib="+m.name, func(b *testing.B) {
					h := m.build(b)(okHandler)
					reqs := make([]*http.Request, len(addrs))
					for i, a := range addrs {
						reqs[i] = httptest.NewRequest("GET", "/orders", nil)
						reqs[i].RemoteAddr = a
						h.ServeHTTP(httptest.NewRecorder(), reqs[i]) // create the key
					}
					refused := 0
					b.ReportAllocs()
					b.ResetTimer()
					for i := range b.N {
						w := httptest.NewRecorder()
						h.ServeHTTP(w, reqs[i%len(reqs)])
						if w.Code != 200 {
							refused++
						}
					}
					b.ReportMetric(float64(refused)/float64(b.N), "refused/op")
				})
			}
		})
	}
}
