package grpclimit_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/internal/hostiletest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// countingHealth is the service behind the interceptors: it counts the
// calls that reach it.
type countingHealth struct {
	healthpb.UnimplementedHealthServer
	n atomic.Int64
}

func (h *countingHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.n.Add(1)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// grpcCase is a case of the adversarial table for the interceptors: the
// metadata of each call, and the limits it is sent against.
type grpcCase struct {
	hostiletest.Case[metadata.MD]
	limits []grpclimit.Limit
}

// hourly is a token bucket of burst that refills one call an hour: over a
// test its bound is exactly burst.
func hourly(burst int) sluice.Limit { return sluice.TokenBucket(sluice.PerHour(1), int64(burst)) }

// TestHostileInterceptors runs hostile metadata against the unary
// interceptor on a real gRPC server on loopback, on memstore and on a
// Redis server: the service sees exactly the calls the limits allow, and
// every other call ends in RESOURCE_EXHAUSTED or INVALID_ARGUMENT.
func TestHostileInterceptors(t *testing.T) {
	for _, st := range []string{"memstore", "redis"} {
		t.Run(st, func(t *testing.T) {
			for _, c := range grpcCases() {
				t.Run(c.Name, func(t *testing.T) { hostileGRPC(t, st, c) })
			}
		})
	}
}

func hostileGRPC(t *testing.T, st string, c grpcCase) {
	var store sluice.Store
	if st == "memstore" {
		mem, err := memstore.New(memstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mem.Close() })
		store = mem
	} else {
		red, err := redisstore.New(redistest.Standalone(t), redisstore.Config{Prefix: redistest.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { red.Close() })
		store = red
	}
	in, err := grpclimit.New(sluice.New(store), grpclimit.Config{Limits: c.limits})
	if err != nil {
		t.Fatal(err)
	}
	svc := &countingHealth{}
	client := serveHealth(t, svc, grpc.UnaryInterceptor(in.Unary()))
	send := func(md metadata.MD) (int, error) {
		ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 30*time.Second)
		defer cancel()
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		switch status.Code(err) {
		case codes.OK:
			return 200, nil
		case codes.ResourceExhausted:
			return 429, nil
		case codes.InvalidArgument:
			return 400, nil
		}
		return 0, err
	}
	hostiletest.Run(t, "grpclimit", c.Case, hostiletest.Sender[metadata.MD]{Send: send, Through: svc.n.Load})
}

func grpcCases() []grpcCase {
	type phase = hostiletest.Phase[metadata.MD]
	n, burst := hostiletest.N, hostiletest.Burst
	user := []grpclimit.Limit{{Name: "per-user", Key: grpclimit.ByMetadata("x-user-id"), Limit: hourly(burst)}}
	userPeer := append(user[:1:1], grpclimit.Limit{Name: "per-peer", Key: grpclimit.ByPeer, Limit: hourly(8)})
	bin := []grpclimit.Limit{{Name: "per-user", Key: grpclimit.ByMetadata("x-user-bin"), Limit: hourly(burst)}}
	peer := []grpclimit.Limit{{Name: "per-peer", Key: grpclimit.ByPeer, Limit: hourly(burst)}}
	md := func(kv ...string) metadata.MD { return metadata.Pairs(kv...) }
	same := func(n int, m metadata.MD) []metadata.MD { return times(n, func(int) metadata.MD { return m }) }
	c := func(name string, limits []grpclimit.Limit, phases ...phase) grpcCase {
		return grpcCase{hostiletest.Case[metadata.MD]{Name: name, Phases: phases}, limits}
	}
	at256 := strings.Repeat("a", 256)
	long := strings.Repeat("d", 300)
	plain := phase{What: "then plain calls", Reqs: same(n, md("x-user-id", "alice")), Want: burst}
	return []grpcCase{
		c("metadata repeated", user,
			phase{What: "x-user-id twice", Reqs: times(n, func(i int) metadata.MD { return md("x-user-id", "alice", "x-user-id", fmt.Sprint("other", i)) })}, plain),
		c("all at once", userPeer,
			phase{What: "12 calls racing", Reqs: same(n, md("x-user-id", "alice")), Want: burst, Parallel: true},
			phase{What: "12 more without x-user-id, racing", Reqs: same(n, md()), Want: 8 - burst, Parallel: true}),
		c("metadata name in odd case", user,
			phase{What: "X-User-ID, x-user-id, X-USER-ID", Reqs: times(n, func(i int) metadata.MD {
				// Pairs lowercases names, as HTTP/2 requires: grpc-go refuses
				// to send an upper-case name at all.
				return md([]string{"X-User-ID", "x-user-id", "X-USER-ID"}[i%3], "alice")
			}), Want: burst}),
		c("metadata absent", userPeer, phase{What: "no x-user-id: counted per peer", Reqs: same(n, md()), Want: 8}),
		c("metadata empty", userPeer, phase{What: "x-user-id: (empty): counted per peer", Reqs: same(n, md("x-user-id", "")), Want: 8}),
		c("metadata 100 KB", user,
			phase{What: "one 100 KB value", Reqs: same(n, md("x-user-id", strings.Repeat("u", 100<<10))), Want: burst, Or4xx: true}),
		c("binary metadata differing only in invalid UTF-8", bin,
			phase{What: "\\xff and \\xfe in turn", Reqs: times(n, func(i int) metadata.MD {
				return md("x-user-bin", string([]byte{0xff - byte(i%2)}))
			}), Want: 2 * burst},
			phase{What: "\\uFFFD, which neither is", Reqs: same(n, md("x-user-bin", "\uFFFD")), Want: burst}),
		c("metadata values differing only after byte 256", user,
			phase{What: "256 a's then 1, then 2, in turn", Reqs: times(n, func(i int) metadata.MD {
				return md("x-user-id", at256+fmt.Sprint(i%2+1))
			}), Want: 2 * burst}),
		c("metadata spelling a long value's digest", user,
			phase{What: "a 300-byte value", Reqs: same(n, md("x-user-id", long)), Want: burst},
			phase{What: "its digest, sent as the value", Reqs: same(n, md("x-user-id", hostiletest.Digest(long))), Want: burst}),
		c("forwarding metadata spoofed", peer,
			phase{What: "x-forwarded-for, x-real-ip, forwarded: a new address each time", Reqs: times(n, func(i int) metadata.MD {
				a := fmt.Sprintf("198.51.100.%d", i+1)
				return md("x-forwarded-for", a, "x-real-ip", a, "forwarded", "for="+a)
			}), Want: burst}),
	}
}

func times[R any](n int, f func(i int) R) []R {
	rs := make([]R, n)
	for i := range rs {
		rs[i] = f(i)
	}
	return rs
}
