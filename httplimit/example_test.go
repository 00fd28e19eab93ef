package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
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
