package rls_test

import (
	"context"
	"testing"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/server/rls"
)

// rawCodec sends and receives messages as they are on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// serveCodec serves the basic config on a server with ServerCodec, the
// health service and the given options, and returns a connection to it.
func serveCodec(t *testing.T, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	cfg, err := rls.ParseConfig("test.yaml", []byte(basic))
	if err != nil {
		t.Fatal(err)
	}
	st, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc, err := rls.New(sluice.New(st), cfg, rls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	srv := grpc.NewServer(append(opts, rls.ServerCodec())...)
	svc.Register(srv)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	return serveGRPC(t, srv)
}

// A message that is not a RateLimitRequest is answered InvalidArgument,
// and the connection keeps serving; the health service, which the codec
// leaves to grpc's, answers.
func TestCodecMalformedOverGRPC(t *testing.T) {
	conn := serveCodec(t)
	for _, wire := range [][]byte{
		{0x0a, 0x05, 'e'},                    // a domain past the end
		{0x0a, 0x02, 0xff, 0xfe},             // a domain of invalid UTF-8
		{0x12, 0x04, 0x0a, 0x02, 0x12, 0x80}, // an entry truncated inside
		{0x0c},                               // a stray end of group
	} {
		var out []byte
		err := conn.Invoke(context.Background(), rlspb.RateLimitService_ShouldRateLimit_FullMethodName, wire, &out, grpc.ForceCodec(rawCodec{}))
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%x: %v, want InvalidArgument", wire, err)
		}
	}
	resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{desc("remote_address=a")}})
	if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 5 {
		t.Fatalf("a valid request after them: %v, %v", resp, err)
	}
	if h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: %v, %v", h, err)
	}
}

// An interceptor sees the request as a *rlspb.RateLimitRequest.
func TestCodecInterceptor(t *testing.T) {
	var seen []string
	conn := serveCodec(t, grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		seen = append(seen, info.FullMethod+" "+req.(*rlspb.RateLimitRequest).Domain)
		return next(ctx, req)
	}))
	resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{desc("remote_address=a")}})
	if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
		t.Fatalf("%v, %v", resp, err)
	}
	if want := rlspb.RateLimitService_ShouldRateLimit_FullMethodName + " edge"; len(seen) != 1 || seen[0] != want {
		t.Errorf("the interceptor saw %q, want [%q]", seen, want)
	}
}
