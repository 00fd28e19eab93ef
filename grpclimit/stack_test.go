package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// serveChained starts a gRPC server on loopback whose calls pass two
// interceptors in turn: per peer (5 an hour, on every call), then per user
// (1 an hour, x-user metadata: calls without it are not limited by it).
func serveChained(t *testing.T) healthpb.HealthClient {
	t.Helper()
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	limiter := sluice.New(store)
	outer, err := grpclimit.New(limiter, grpclimit.Config{Limits: []grpclimit.Limit{
		{Name: "per-peer", Key: grpclimit.ByPeer, Limit: sluice.FixedWindow(5, time.Hour)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := grpclimit.New(limiter, grpclimit.Config{Limits: []grpclimit.Limit{
		{Name: "per-user", Key: grpclimit.ByMetadata("x-user"), Limit: sluice.FixedWindow(1, time.Hour)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return serveHealth(t, health.NewServer(), grpc.ChainUnaryInterceptor(outer.Unary(), inner.Unary()),
		grpc.ChainStreamInterceptor(outer.Stream(), inner.Stream()))
}

// TestChainedInterceptors: calls the inner interceptor refuses are not
// charged to the outer one. After one call of ann's and three refused,
// the peer has 4 of its 5 calls left, not 1; unary and stream calls alike.
func TestChainedInterceptors(t *testing.T) {
	for _, kind := range []string{"unary", "stream"} {
		t.Run(kind, func(t *testing.T) {
			client := serveChained(t)
			call := func(ctx context.Context) error {
				if kind == "unary" {
					_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
					return err
				}
				ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				s, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
				if err == nil {
					_, err = s.Recv()
				}
				return err
			}
			ann := metadata.AppendToOutgoingContext(context.Background(), "x-user", "ann")
			if err := call(ann); err != nil {
				t.Fatalf("ann's first call: %v", err)
			}
			for i := range 3 {
				if err := call(ann); status.Code(err) != codes.ResourceExhausted {
					t.Fatalf("ann's call %d: %v, want RESOURCE_EXHAUSTED from per-user", i+2, err)
				}
			}
			for i := range 4 {
				if err := call(context.Background()); err != nil {
					t.Fatalf("anonymous call %d of the peer's 4 left: %v", i+1, err)
				}
			}
			if err := call(context.Background()); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("the peer's sixth call: %v, want RESOURCE_EXHAUSTED from per-peer", err)
			}
		})
	}
}
