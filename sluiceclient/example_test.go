package sluiceclient_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluiceclient"
)

// A client of a sluice-protected server: the second request of a second is
// refused with 429 and Retry-After: 1; the client waits it out (plus
// jitter) and retries, and the caller sees only the success.
func ExampleNew() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	limit, _ := httplimit.New(sluice.New(store), httplimit.Config{
		Limits: []httplimit.Limit{{Name: "global", Key: httplimit.Global, Limit: sluice.FixedWindow(1, time.Second)}},
		Logger: slog.New(slog.DiscardHandler),
	})
	var seen atomic.Int64
	srv := httptest.NewServer(limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		io.WriteString(w, "hello")
	})))
	defer srv.Close()

	c, err := sluiceclient.New(sluiceclient.Config{})
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: c}
	for range 2 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	fmt.Println("admitted by the server:", seen.Load())
	// Output:
	// 200 hello
	// 200 hello
	// admitted by the server: 2
}

// A request whose deadline comes before the server's Retry-After gets the
// server's answer at once: the client does not sleep into a timeout.
func ExampleClient_RoundTrip_deadline() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	c, _ := sluiceclient.New(sluiceclient.Config{})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	start := time.Now()
	resp, err := c.RoundTrip(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Retry-After"), time.Since(start) < time.Second)
	// Output: 429 30 true
}

// A pacer keeps a client under a rate it knows, on sluice's own limiter,
// and under what the server's RateLimit header fields say remains.
func ExampleNewPacer() {
	pacer, err := sluiceclient.NewPacer(sluiceclient.PacerConfig{Rate: sluice.PerSecond(20)})
	if err != nil {
		panic(err)
	}
	c, _ := sluiceclient.New(sluiceclient.Config{Pacer: pacer, ThrottleK: 2})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()

	client := &http.Client{Transport: c}
	start := time.Now()
	for range 5 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
	}
	fmt.Println("5 requests at 20/s took at least 200ms:", time.Since(start) >= 200*time.Millisecond)
	// Output: 5 requests at 20/s took at least 200ms: true
}

// The gRPC interceptors share the Client's retry budget, throttling and
// pacer with its HTTP transport.
func ExampleClient_UnaryClientInterceptor() {
	c, _ := sluiceclient.New(sluiceclient.Config{})
	conn, err := grpc.NewClient("dns:///api.example.com:443",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(c.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(c.StreamClientInterceptor()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	fmt.Println("ready")
	// Output: ready
}
