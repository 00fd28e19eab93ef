package grpclimit_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// serveEntry starts a gRPC server whose calls pass a limit that counts
// only the calls through the checkout entry (2 an hour), after, when
// marked, interceptors that mark their calls as coming through checkout.
func serveEntry(t *testing.T, marked bool) healthpb.HealthClient {
	t.Helper()
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	limiter := sluice.New(store)
	inner, err := grpclimit.New(limiter, grpclimit.Config{Limits: []grpclimit.Limit{
		{Name: "orders-from-checkout", Key: grpclimit.Global, Limit: sluice.FixedWindow(2, time.Hour), Entry: "checkout"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !marked {
		return serveHealth(t, health.NewServer(), grpc.ChainUnaryInterceptor(inner.Unary()), grpc.ChainStreamInterceptor(inner.Stream()))
	}
	outer, err := grpclimit.New(limiter, grpclimit.Config{Entry: "checkout", Limits: []grpclimit.Limit{
		{Name: "per-peer", Key: grpclimit.ByPeer, Limit: sluice.FixedWindow(100, time.Hour)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return serveHealth(t, health.NewServer(), grpc.ChainUnaryInterceptor(outer.Unary(), inner.Unary()),
		grpc.ChainStreamInterceptor(outer.Stream(), inner.Stream()))
}

// TestEntry: a limit with an Entry counts the calls an interceptor before
// it marked as coming through that entry (unary and stream alike), and
// not the calls of a server that marks none.
func TestEntry(t *testing.T) {
	ctx := context.Background()
	client := serveEntry(t, true)
	for i := range 2 {
		if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d through checkout: %v", i+1, err)
		}
	}
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call through checkout: %v, want RESOURCE_EXHAUSTED", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := client.Watch(sctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("stream through checkout: %v, want RESOURCE_EXHAUSTED", err)
	}
	client = serveEntry(t, false)
	for i := range 5 {
		if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d through no entry: %v, want it not limited", i+1, err)
		}
	}
}

// TestWhen: reads (2 an hour per peer) are limited only while the peer's
// writes use more than 80% of theirs (8 of 10); an interceptor before
// them marks each call's entry from its x-op metadata, which keeps writes
// and reads apart. A list whose relations cannot be resolved is refused.
func TestWhen(t *testing.T) {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	in, err := grpclimit.New(sluice.New(store), grpclimit.Config{Limits: []grpclimit.Limit{
		{Name: "writes", Key: grpclimit.ByPeer, Limit: sluice.FixedWindow(10, time.Hour), Entry: "write"},
		{Name: "reads", Key: grpclimit.ByPeer, Limit: sluice.FixedWindow(2, time.Hour), Entry: "read", When: &decide.When{Limit: "writes", Above: 800}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	mark := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if op := md.Get("x-op"); len(op) == 1 {
			ctx = sluice.WithEntry(ctx, op[0])
		}
		return handler(ctx, req)
	}
	client := serveHealth(t, health.NewServer(), grpc.ChainUnaryInterceptor(mark, in.Unary()))
	call := func(op string) error {
		_, err := client.Check(metadata.AppendToOutgoingContext(context.Background(), "x-op", op), &healthpb.HealthCheckRequest{})
		return err
	}
	for i := range 5 {
		if err := call("read"); err != nil {
			t.Fatalf("read %d while writes are idle: %v", i+1, err)
		}
	}
	for i := range 9 {
		if err := call("write"); err != nil {
			t.Fatalf("write %d: %v", i+1, err)
		}
	}
	time.Sleep(100 * time.Millisecond) // decide.Config.RelateFor: the last read's peek is stale
	var got []codes.Code
	for range 3 {
		got = append(got, status.Code(call("read")))
	}
	if want := []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}; !slices.Equal(got, want) {
		t.Fatalf("reads while writes are at 9 of 10: %v, want %v", got, want)
	}
	for _, bad := range []*decide.When{{Limit: "nope", Above: 800}, {Limit: "reads", Above: 800}, {Limit: "writes", Above: 0}} {
		_, err := grpclimit.New(sluice.New(store), grpclimit.Config{Limits: []grpclimit.Limit{
			{Name: "writes", Key: grpclimit.ByPeer, Limit: sluice.FixedWindow(10, time.Hour)},
			{Name: "reads", Key: grpclimit.ByPeer, Limit: sluice.FixedWindow(2, time.Hour), When: bad},
		}})
		if err == nil {
			t.Errorf("When %+v: accepted", bad)
		}
	}
}
