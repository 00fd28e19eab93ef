package shed_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/shed"
)

// A service admits requests while fewer than the learned limit are in
// flight, and sheds the rest with 503 and Retry-After.
func Example() {
	l, err := shed.New(shed.Config{InitialLimit: 1, MinLimit: 1})
	if err != nil {
		panic(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	h := l.Middleware(nil)(hello)

	busy, _ := l.Acquire(context.Background(), shed.Default) // a request in flight takes the only slot
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	fmt.Println(w.Code, "Retry-After:", w.Header().Get("Retry-After"))
	busy.Done()

	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	fmt.Println(w.Code, w.Body.String())
	fmt.Printf("%+v\n", l.Stats().Classes[0])
	// Output:
	// 503 Retry-After: 1
	// 200 hello
	// {Priority:default Admitted:2 Waited:0 Shed:1}
}

// The priority header counts only from the proxies in front of the
// service; anyone else who sends it is default.
func ExampleHeaderPriority() {
	lb := &httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	prio := shed.HeaderPriority("Sluice-Priority", lb)
	for _, peer := range []string{"10.0.0.7:443", "203.0.113.9:5555"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer
		r.Header.Set("Sluice-Priority", "critical")
		fmt.Println(peer, prio(r))
	}
	// Output:
	// 10.0.0.7:443 critical
	// 203.0.113.9:5555 default
}

// A gRPC server sheds calls with UNAVAILABLE and RetryInfo; the priority
// comes from metadata that only the trusted networks may set.
func ExampleLimiter_UnaryServerInterceptor() {
	l, err := shed.New(shed.Config{})
	if err != nil {
		panic(err)
	}
	prio := shed.MetadataPriority("sluice-priority", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(l.UnaryServerInterceptor(prio)),
		grpc.StreamInterceptor(l.StreamServerInterceptor(prio)),
	)
	defer srv.Stop()
	fmt.Println(l.Stats().Algorithm, l.Stats().Limit)
	// Output: vegas 20
}
