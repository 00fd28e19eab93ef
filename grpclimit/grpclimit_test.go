package grpclimit_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// serve starts a real gRPC server on loopback (the standard health service,
// behind the interceptors) and returns a client connected to it.
func serve(t *testing.T, cfg grpclimit.Config) healthpb.HealthClient {
	t.Helper()
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	in, err := grpclimit.New(sluice.New(store), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serveHealth(t, health.NewServer(), grpc.UnaryInterceptor(in.Unary()), grpc.StreamInterceptor(in.Stream()))
}

// serveHealth starts a real gRPC server on loopback with opts, serving svc,
// and returns a client connected to it.
func serveHealth(t *testing.T, svc healthpb.HealthServer, opts ...grpc.ServerOption) healthpb.HealthClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, svc)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func TestUnaryRefusalCarriesRetryInfo(t *testing.T) {
	client := serve(t, grpclimit.Config{Limits: []grpclimit.Limit{
		{Name: "per-method", Key: grpclimit.ByMethod, Limit: sluice.FixedWindow(2, time.Hour)},
		{Name: "per-peer", Key: grpclimit.ByPeer, Limit: sluice.TokenBucket(sluice.PerSecond(100), 100)},
	}})
	ctx := context.Background()
	for i := range 2 {
		if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("third call: %v", err)
	}
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	if retry == nil || retry.RetryDelay.AsDuration() <= 0 || retry.RetryDelay.AsDuration() > time.Hour {
		t.Fatalf("RetryInfo %v in %v", retry, st.Details())
	}
}

func TestStreamAndMetadata(t *testing.T) {
	client := serve(t, grpclimit.Config{Limits: []grpclimit.Limit{
		{Name: "per-tenant", Key: grpclimit.ByMetadata("x-tenant"), Limit: sluice.FixedWindow(1, time.Hour)},
	}})
	acme := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "acme")
	watch := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	if err := watch(acme); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	if err := watch(acme); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream for acme: %v", err)
	}
	if err := watch(context.Background()); err != nil {
		t.Fatalf("a call without the metadata is not limited by it: %v", err)
	}
	// A value too long to store whole is limited by its digest, not let
	// through or refused as an error.
	long := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", strings.Repeat("t", 5000))
	if err := watch(long); err != nil {
		t.Fatalf("first stream with a long tenant: %v", err)
	}
	if err := watch(long); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream with the same long tenant: %v", err)
	}
}

func TestConcurrencyLeaseReleasedAfterCall(t *testing.T) {
	client := serve(t, grpclimit.Config{Limits: []grpclimit.Limit{
		{Name: "in-flight", Key: grpclimit.Global, Limit: sluice.Concurrency(1, time.Minute)},
	}})
	for i := range 5 { // sequential calls: each releases its slot
		if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	l := sluice.New(nil)
	for _, cfg := range []grpclimit.Config{
		{},
		{Limits: []grpclimit.Limit{{Key: grpclimit.Global, Limit: sluice.FixedWindow(1, time.Second)}}},
		{Limits: []grpclimit.Limit{{Name: "a", Limit: sluice.FixedWindow(1, time.Second)}}},
		{Limits: []grpclimit.Limit{{Name: "a", Key: grpclimit.Global, Limit: sluice.FixedWindow(1, 0)}}},
	} {
		if _, err := grpclimit.New(l, cfg); err == nil {
			t.Errorf("accepted %+v", cfg)
		}
	}
}
