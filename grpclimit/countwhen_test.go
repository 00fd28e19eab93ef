package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
)

// loginService fails a call whose Service is not "right" with
// UNAUTHENTICATED.
type loginService struct {
	healthpb.UnimplementedHealthServer
}

func (loginService) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if req.Service != "right" {
		return nil, status.Error(codes.Unauthenticated, "wrong password")
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// TestCountWhenGRPCCodes: a limit whose LateCost counts only
// UNAUTHENTICATED calls (a policy's count_when, in gRPC codes) is never
// used by successful calls, and refuses once failed ones exhausted it.
func TestCountWhenGRPCCodes(t *testing.T) {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	in, err := grpclimit.New(sluice.New(store), grpclimit.Config{Limits: []grpclimit.Limit{{
		Name: "login-failures", Key: grpclimit.Global, Limit: sluice.FixedWindow(2, time.Hour), Reserve: 1,
		Late: &decide.LateCost{When: &decide.StatusSet{{From: int(codes.Unauthenticated), To: int(codes.Unauthenticated)}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	client := serveHealth(t, loginService{}, grpc.UnaryInterceptor(in.Unary()))
	var got []codes.Code
	for _, password := range []string{"right", "right", "right", "wrong", "right", "wrong", "wrong", "right"} {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: password})
		got = append(got, status.Code(err))
	}
	want := []codes.Code{codes.OK, codes.OK, codes.OK, codes.Unauthenticated, codes.OK, codes.Unauthenticated, codes.ResourceExhausted, codes.ResourceExhausted}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("codes %v, want %v: successes never counted, two failures exhaust the limit", got, want)
		}
	}
}
