package sluiceclient

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
)

// calls records when a gRPC server saw each call, in front of grpclimit.
type calls struct {
	mu    sync.Mutex
	times []time.Time
}

func (c *calls) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	c.mark()
	return h(ctx, req)
}

func (c *calls) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	c.mark()
	return h(srv, ss)
}

func (c *calls) mark() {
	c.mu.Lock()
	c.times = append(c.times, time.Now())
	c.mu.Unlock()
}

func (c *calls) all() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.times...)
}

// serveGRPC runs a real gRPC server (the health service behind grpclimit
// with one global limit) on an in-memory network, and returns a client
// connection through c's interceptors.
func serveGRPC(t *testing.T, limit sluice.Limit, c *Client) (healthpb.HealthClient, *calls) {
	t.Helper()
	store, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	in, err := grpclimit.New(sluice.New(store), grpclimit.Config{
		Limits: []grpclimit.Limit{{Name: "global", Key: grpclimit.Global, Limit: limit}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := &calls{}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(seen.unary, in.Unary()), grpc.ChainStreamInterceptor(seen.stream, in.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	p := newPipes()
	go srv.Serve(p)
	conn, err := grpc.NewClient("passthrough:///sluice.test",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return p.Dial(ctx, "pipe", addr) }),
		grpc.WithUnaryInterceptor(c.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(c.StreamClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		store.Close()
	})
	return healthpb.NewHealthClient(conn), seen
}

// A unary call refused by grpclimit with RESOURCE_EXHAUSTED and RetryInfo
// is retried after RetryInfo's delay; with a deadline shorter than it, the
// refusal comes back at once.
func TestUnaryHonoursRetryInfo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient(t, nil, Config{})
		client, seen := serveGRPC(t, sluice.FixedWindow(1, 2*time.Second), c)
		ctx := t.Context()
		if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		start := time.Now()
		_, err := client.Check(short, &healthpb.HealthCheckRequest{})
		if status.Code(err) != codes.ResourceExhausted || time.Since(start) != 0 {
			t.Fatalf("with a 1 s deadline: %v after %s, want RESOURCE_EXHAUSTED at once", err, time.Since(start))
		}
		if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("with no deadline: %v, want success after a retry", err)
		}
		at := seen.all()
		if len(at) != 4 || at[3].Sub(at[2]) < 2*time.Second || at[3].Sub(at[2]) >= 2500*time.Millisecond {
			t.Fatalf("calls at %v, want the fourth 2 s to 2.5 s after the third", at)
		}
	})
}

// UNAVAILABLE without RetryInfo is retried only for a call with an
// idempotency key in its metadata.
func TestUnaryUnavailableNeedsAKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient(t, nil, Config{BaseBackoff: 10 * time.Millisecond})
		var n int
		unavailable := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			n++
			return status.Error(codes.Unavailable, "down")
		}
		call := c.UnaryClientInterceptor()
		if err := call(t.Context(), "/m", nil, nil, nil, unavailable); status.Code(err) != codes.Unavailable || n != 1 {
			t.Fatalf("without a key: %v after %d attempts, want 1", err, n)
		}
		n = 0
		ctx := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", "k")
		if err := call(ctx, "/m", nil, nil, nil, unavailable); status.Code(err) != codes.Unavailable || n != 4 {
			t.Fatalf("with a key: %v after %d attempts, want 4", err, n)
		}
	})
}

// A stream refused with RetryInfo is not replayed, but the next stream
// waits out its delay.
func TestStreamRefusalHoldsNextStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient(t, nil, Config{})
		client, seen := serveGRPC(t, sluice.FixedWindow(1, 3*time.Second), c)
		watch := func() error {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			s, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}
		if err := watch(); err != nil && err != io.EOF {
			t.Fatalf("first stream: %v", err)
		}
		if err := watch(); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("second stream: %v, want RESOURCE_EXHAUSTED", err)
		}
		if err := watch(); err != nil && err != io.EOF {
			t.Fatalf("third stream: %v", err)
		}
		at := seen.all()
		if len(at) != 3 || at[2].Sub(at[1]) < 3*time.Second {
			t.Fatalf("streams at %v, want the third 3 s after the refused one", at)
		}
	})
}
