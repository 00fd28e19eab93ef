package grpclimit_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// tokenService reports the tokens a call used in its response metadata,
// as the request's Service field says: "header:N", "trailer:N",
// "send:N" (grpc.SendHeader) or "none".
type tokenService struct {
	healthpb.UnimplementedHealthServer
}

func report(service string) (how string, md metadata.MD) {
	how, n, _ := strings.Cut(service, ":")
	return how, metadata.Pairs("x-tokens-used", n)
}

func (s tokenService) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	switch how, md := report(req.Service); how {
	case "header":
		grpc.SetHeader(ctx, md)
	case "send":
		grpc.SendHeader(ctx, md)
	case "trailer":
		grpc.SetTrailer(ctx, md)
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (s tokenService) Watch(req *healthpb.HealthCheckRequest, ss grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	how, md := report(req.Service)
	if how == "header" {
		ss.SetHeader(md)
	}
	ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
	if how == "trailer" {
		ss.SetTrailer(md)
	}
	return nil
}

// TestSettleFromMetadata: the interceptors charge what a handler reports in
// its response header or trailer metadata, unary or streaming, bounded by
// Max, the reservation when it reports nothing; with Strip the client
// never sees the report.
func TestSettleFromMetadata(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	store, err := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	limiter := sluice.New(store)
	budget := sluice.FixedWindow(5000, time.Hour)
	in, err := grpclimit.New(limiter, grpclimit.Config{Limits: []grpclimit.Limit{{
		Name: "tokens", Key: grpclimit.Global, Limit: budget, Reserve: 100,
		Late: &decide.LateCost{Header: "X-Tokens-Used", Max: 1000, Strip: true},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 1)
	after := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		defer func() { done <- struct{}{} }()
		return h(ctx, req)
	}
	afterStream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		defer func() { done <- struct{}{} }()
		return h(srv, ss)
	}
	client := serveHealth(t, tokenService{}, grpc.ChainUnaryInterceptor(after, in.Unary()), grpc.ChainStreamInterceptor(afterStream, in.Stream()))
	key := string(decide.AppendKey(nil, "tokens", "global"))
	left := int64(5000)
	for _, tc := range []struct {
		stream  bool
		service string
		charged int64
	}{
		{false, "header:250", 250}, {false, "send:30", 30}, {false, "trailer:700", 700},
		{false, "trailer:9999", 1000}, {false, "none", 100}, {false, "trailer:x", 100},
		{true, "header:60", 60}, {true, "trailer:410", 410}, {true, "none", 100},
	} {
		var header, trailer metadata.MD
		req := &healthpb.HealthCheckRequest{Service: tc.service}
		if tc.stream {
			ws, err := client.Watch(context.Background(), req, grpc.Header(&header), grpc.Trailer(&trailer))
			if err != nil {
				t.Fatal(err)
			}
			for err == nil {
				_, err = ws.Recv()
			}
			if err != io.EOF {
				t.Fatalf("%s: %v", tc.service, err)
			}
		} else if _, err := client.Check(context.Background(), req, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
			t.Fatalf("%s: %v", tc.service, err)
		}
		<-done
		if v := append(header.Get("x-tokens-used"), trailer.Get("x-tokens-used")...); len(v) > 0 {
			t.Errorf("%s: the client saw x-tokens-used %q despite Strip", tc.service, v)
		}
		d, err := limiter.AllowN(context.Background(), key, budget, 0)
		if left -= tc.charged; err != nil || d.Remaining != left {
			t.Errorf("stream %v, %s: %d remaining (%v), want %d", tc.stream, tc.service, d.Remaining, err, left)
		}
	}
}
