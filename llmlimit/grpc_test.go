package llmlimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/internal/llmtest"
	"github.com/sluicehq/sluice/llmlimit"
	"github.com/sluicehq/sluice/memstore"
)

// byTenantMetadata keys an LLM call by the x-tenant metadata of the gRPC
// call whose handler makes it: the handler passes its context on.
func byTenantMetadata(r *http.Request) (string, error) {
	md, _ := metadata.FromIncomingContext(r.Context())
	if v := md.Get("x-tenant"); len(v) == 1 && v[0] != "" {
		return v[0], nil
	}
	return "", errors.New("no x-tenant")
}

// llmService is a gRPC service whose handler calls an LLM API (a health
// check stands in for its method): with the caller's context, through a
// client whose Transport is llmlimit's; a refusal is RESOURCE_EXHAUSTED.
type llmService struct {
	healthpb.UnimplementedHealthServer
	client *http.Client
	url    string
	body   string
}

func (s *llmService) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/chat/completions", strings.NewReader(s.body))
	resp, err := s.client.Do(req)
	var re *llmlimit.RefusedError
	switch {
	case errors.As(err, &re):
		return nil, status.Errorf(codes.ResourceExhausted, "%v", re)
	case err != nil:
		return nil, status.FromContextError(err).Err()
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil { // the answer, read: settled from its usage
		return nil, status.FromContextError(err).Err()
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// TestTransportInGRPCHandler: a gRPC handler that calls an LLM API holds
// its calls to a budget per caller with llmlimit, behind grpclimit's
// interceptor holding the gRPC calls to a rate: each call reserves,
// is settled from the answer's usage, a call past the budget is refused
// without reaching the API, and a call the client abandons mid-stream
// (its deadline passes) is charged the estimate of what was streamed.
func TestTransportInGRPCHandler(t *testing.T) {
	mem, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	up := llmtest.New(llmtest.Config{PromptPercent: 110, ChunkTokens: 10, Pause: 20 * time.Millisecond})
	var reached atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1); up.ServeHTTP(w, r) }))
	t.Cleanup(api.Close)
	settled := make(chan decide.Settled, 8)
	tr, err := llmlimit.New(sluice.New(mem), llmlimit.Config{
		Limits:  []llmlimit.Limit{{Name: "tokens", Key: byTenantMetadata, Limit: sluice.CalendarWindow(2000, sluice.Day, "UTC")}},
		Settled: func(s decide.Settled) { settled <- s },
	})
	if err != nil {
		t.Fatal(err)
	}
	svc := &llmService{client: &http.Client{Transport: tr}, url: api.URL, body: chat(100, 200, true)} // 100 + 200 reserved
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	calls, err := grpclimit.New(sluice.New(mem), grpclimit.Config{Limits: []grpclimit.Limit{
		{Name: "calls", Key: grpclimit.ByMetadata("x-tenant"), Limit: sluice.FixedWindow(100, time.Hour)}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(calls.Unary())) // a rate of calls, beside the budget of tokens
	healthpb.RegisterHealthServer(srv, svc)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := healthpb.NewHealthClient(conn)
	as := func(tenant string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "x-tenant", tenant)
	}
	// 6 calls of 110 prompt + 200 output tokens: 1,860 of 2,000.
	for i := range 6 {
		if _, err := client.Check(as("acme"), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if s := <-settled; s.Reserved != 300 || s.Actual != 310 || s.Estimated {
			t.Errorf("call %d settled %+v, want 300 reserved, 310 charged from the usage", i, s)
		}
	}
	before := reached.Load()
	_, err = client.Check(as("acme"), &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.ResourceExhausted || reached.Load() != before {
		t.Errorf("a call past the budget: %v (%d reached the API), want RESOURCE_EXHAUSTED, not made", err, reached.Load()-before)
	}
	// A client that gives up mid-stream: 20 events 20 ms apart, a
	// deadline of 200 ms. The call is cut; its settle charges the
	// prompt's estimate and the text streamed, never nothing.
	ctx, cancel := context.WithTimeout(as("beta"), 200*time.Millisecond)
	defer cancel()
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a call past its deadline: %v, want DEADLINE_EXCEEDED", err)
	}
	select {
	case s := <-settled:
		if !s.Estimated || s.Actual < 100 || s.Actual >= 300 {
			t.Errorf("a call cut mid-stream settled %+v, want an estimate from 100 (the prompt) up to less than the 300 reserved", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a call cut mid-stream was never settled")
	}
}
