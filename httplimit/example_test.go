package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

func ExampleNew() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	clientIP := &httplimit.ClientIP{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, // the load balancers
	}
	limit, err := httplimit.New(sluice.New(store), httplimit.Config{Limits: []httplimit.Limit{
		{Name: "global", Key: httplimit.Global, Limit: sluice.GCRA(sluice.PerSecond(5000), 5000)},
		{Name: "per-ip", Key: httplimit.ByIP(clientIP), Limit: sluice.SlidingWindow(2, time.Minute)},
	}})
	if err != nil {
		panic(err)
	}
	handler := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))

	for i := 0; i < 3; i++ {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113.7:4711"
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "global";q=5000;w=1, "per-ip";q=2;w=60
	// 200 "global";q=5000;w=1, "per-ip";q=2;w=60
	// 429 "global";q=5000;w=1, "per-ip";q=2;w=60
}

// KeyValue bounds a value taken from a request before it becomes part of a
// key: short values are kept, long ones (and look-alikes of a digest) become
// a fixed-size SHA-256 digest.
func ExampleKeyValue() {
	fmt.Println(httplimit.KeyValue("ann"))
	fmt.Println(httplimit.KeyValue(strings.Repeat("a", 1000)))
	// Output:
	// ann
	// sha256:41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3
}

// SetHeaders writes the fields the middleware sends, for a service that
// decided elsewhere (here with a Limiter directly) and answers itself.
func ExampleSetHeaders() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limiter := sluice.New(store)
	planned := []httplimit.Planned{{Name: "per-user", Key: "user:42", Limit: sluice.FixedWindow(2, time.Minute), Cost: 1}}
	reqs := []sluice.Request{{Key: planned[0].Key, Limit: planned[0].Limit, Cost: 1}}
	ds := make([]sluice.Decision, 1)
	for range 3 {
		d, _ := limiter.CheckEach(context.Background(), reqs, ds)
		h := http.Header{}
		httplimit.SetHeaders(h, planned, ds, d)
		fmt.Println(d.Allowed, h.Get("RateLimit-Policy"), h.Get("Retry-After") != "")
	}
	// Output:
	// true "per-user";q=2;w=60 false
	// true "per-user";q=2;w=60 false
	// false "per-user";q=2;w=60 true
}
