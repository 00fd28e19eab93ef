package shed

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/httplimit"
)

func TestHeaderPriorityTrust(t *testing.T) {
	trusted := &httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	prio := HeaderPriority("sluice-priority", trusted)
	for _, c := range []struct {
		name, peer string
		values     []string
		want       Priority
	}{
		{"trusted critical", "10.1.2.3:1", []string{"critical"}, Critical},
		{"trusted, any case", "10.1.2.3:1", []string{"SHEDDABLE"}, Sheddable},
		{"untrusted critical", "203.0.113.9:1", []string{"critical"}, Default},
		{"untrusted sheddable", "203.0.113.9:1", []string{"sheddable"}, Default},
		{"sent twice", "10.1.2.3:1", []string{"critical", "critical"}, Default},
		{"unknown value", "10.1.2.3:1", []string{"urgent"}, Default},
		{"NUL inside", "10.1.2.3:1", []string{"crit\x00ical"}, Default},
		{"padded", "10.1.2.3:1", []string{" critical"}, Default},
		{"1 MB", "10.1.2.3:1", []string{strings.Repeat("critical", 1<<17)}, Default},
		{"no peer address", "@", []string{"critical"}, Default},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		r.Header["Sluice-Priority"] = c.values
		if got := prio(r); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.1.2.3:1"
	r.Header.Set("Sluice-Priority", "critical")
	if got := HeaderPriority("Sluice-Priority", nil)(r); got != Default {
		t.Errorf("nil ClientIP: %v, want default", got)
	}
	if _, err := ParsePriority(strings.Repeat("x", 1<<20)); err == nil || len(err.Error()) > 200 {
		t.Errorf("ParsePriority of 1 MB: error %.300v", err)
	}
}

// TestUntrustedCriticalIsShed: over real HTTP, a client that is not a
// trusted proxy claims critical while the limit is full; it is shed at
// once as default work, with 503, Retry-After and a problem document,
// and counted.
func TestUntrustedCriticalIsShed(t *testing.T) {
	l := newLimiter(t, Config{InitialLimit: 4, MinLimit: 4, CriticalWait: 10 * time.Second})
	trusted := &httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}
	srv := httptest.NewServer(l.Middleware(HeaderPriority("Sluice-Priority", trusted))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	for range 4 {
		tok, err := l.Acquire(context.Background(), Default)
		if err != nil {
			t.Fatal(err)
		}
		defer tok.Ignore()
	}
	for _, v := range []string{"critical", strings.Repeat("critical", 8000), "crit\tical"} {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("Sluice-Priority", v)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || doc["priority"] != "default" || time.Since(start) > 5*time.Second {
			t.Errorf("%.20q: %d Retry-After %q %v after %v; want 503, 1, priority default, at once", v, resp.StatusCode, resp.Header.Get("Retry-After"), doc, time.Since(start))
		}
	}
	if st := l.Stats(); st.Classes[0].Shed != 3 || st.Classes[1] != (ClassStats{Priority: "critical"}) {
		t.Errorf("stats %+v: want 3 default shed, no critical", st)
	}
}

// TestGRPCInterceptors runs a real gRPC server on loopback: a full limit
// refuses unary calls and new streams with UNAVAILABLE and RetryInfo; a
// critical call from a trusted peer waits and gets the next free slot; a
// caller outside the trusted networks claiming critical is default.
func TestGRPCInterceptors(t *testing.T) {
	l := newLimiter(t, Config{InitialLimit: 2, MinLimit: 2, CriticalWait: 10 * time.Second})
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	srv, conn := startGRPC(t, l, MetadataPriority("sluice-priority", loopback))
	defer srv.Stop()
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("with room: %v", err)
	}
	toks := []Token{}
	for range 2 {
		tok, _ := l.Acquire(ctx, Default)
		toks = append(toks, tok)
	}
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	wantUnavailable(t, "unary", err)
	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	wantUnavailable(t, "stream", err)

	done := make(chan error)
	go func() {
		cctx := metadata.AppendToOutgoingContext(ctx, "sluice-priority", "critical")
		_, err := client.Check(cctx, &healthpb.HealthCheckRequest{})
		done <- err
	}()
	for l.Stats().Waiting == 0 {
		time.Sleep(time.Millisecond)
	}
	toks[0].Ignore()
	if err := <-done; err != nil {
		t.Fatalf("critical call from a trusted peer: %v", err)
	}
	toks[1].Ignore()

	// The same claim from a peer that is not trusted is default.
	srv2, conn2 := startGRPC(t, l, MetadataPriority("sluice-priority", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}))
	defer srv2.Stop()
	defer conn2.Close()
	for range 2 {
		tok, _ := l.Acquire(ctx, Default)
		defer tok.Ignore()
	}
	cctx := metadata.AppendToOutgoingContext(ctx, "sluice-priority", "critical")
	_, err = healthpb.NewHealthClient(conn2).Check(cctx, &healthpb.HealthCheckRequest{})
	wantUnavailable(t, "untrusted critical", err)
	if st := l.Stats(); st.Classes[1].Admitted != 1 || st.Classes[1].Shed != 0 {
		t.Errorf("stats %+v: want the one trusted critical call admitted, none shed", st)
	}
}

func startGRPC(t *testing.T, l *Limiter, prio GRPCPriority) (*grpc.Server, *grpc.ClientConn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(l.UnaryServerInterceptor(prio)), grpc.StreamInterceptor(l.StreamServerInterceptor(prio)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return srv, conn
}

func wantUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != codes.Unavailable {
		t.Fatalf("%s: %v, want UNAVAILABLE", what, err)
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.RetryDelay.AsDuration() == time.Second {
			return
		}
	}
	t.Fatalf("%s: %v carries no RetryInfo of 1s", what, err)
}
