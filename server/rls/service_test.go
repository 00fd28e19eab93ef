package rls_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/server/rls"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// clock is a fake time source shared by the store and the service.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// t0 is 10:00:15 on a whole minute boundary plus 15s: a minute window has
// 45s left.
var t0 = time.Date(2026, 3, 2, 10, 0, 15, 0, time.UTC)

// backend is a store with its clock.
type backend struct {
	name  string
	store func(t *testing.T, c *clock) sluice.Store
}

var backends = []backend{
	{"memstore", func(t *testing.T, c *clock) sluice.Store {
		s, err := memstore.New(memstore.Config{Now: c.Now, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"redis", func(t *testing.T, c *clock) sluice.Store {
		s, err := redisstore.New(redistest.Standalone(t), redisstore.Config{Prefix: redistest.Prefix(t), Now: c.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"redis-cluster", func(t *testing.T, c *clock) sluice.Store {
		s, err := redisstore.New(redistest.Cluster(t), redisstore.Config{Prefix: redistest.Prefix(t), Now: c.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
}

// harness is a Service behind a real gRPC server on loopback and a client
// of it.
type harness struct {
	svc    *rls.Service
	client rlspb.RateLimitServiceClient
	clock  *clock
}

func start(t *testing.T, b backend, config string, opts rls.Options) *harness {
	t.Helper()
	cfg, err := rls.ParseConfig("test.yaml", []byte(config))
	if err != nil {
		t.Fatal(err)
	}
	return startConfig(t, b, cfg, opts)
}

// startConfig is start with a compiled configuration.
func startConfig(t *testing.T, b backend, cfg *rls.Config, opts rls.Options) *harness {
	t.Helper()
	c := &clock{now: t0}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = c.Now
	}
	svc, err := rls.New(sluice.New(b.store(t, c)), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	srv := grpc.NewServer(rls.ServerCodec())
	svc.Register(srv)
	conn := serveGRPC(t, srv)
	return &harness{svc: svc, client: rlspb.NewRateLimitServiceClient(conn), clock: c}
}

// desc builds a descriptor from "k=v" pairs.
func desc(kv ...string) *commonpb.RateLimitDescriptor {
	d := &commonpb.RateLimitDescriptor{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		d.Entries = append(d.Entries, &commonpb.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func (h *harness) ask(t *testing.T, domain string, hitsAddend uint32, ds ...*commonpb.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := h.client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hitsAddend})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
	}
	return resp
}

// brief renders a response as "OVER_LIMIT [OK 4/5m 45s, ...]" for step tables.
func brief(r *rlspb.RateLimitResponse) string {
	var parts []string
	for _, s := range r.Statuses {
		p := s.Code.String()
		if l := s.CurrentLimit; l != nil {
			p += fmt.Sprintf(" %d/%d%s", s.LimitRemaining, l.RequestsPerUnit, strings.ToLower(l.Unit.String()[:1]))
			if l.UnitMultiplier != nil {
				p += fmt.Sprintf("x%d", l.UnitMultiplier.Value)
			}
			p += fmt.Sprintf(" %s", s.DurationUntilReset.AsDuration())
		} else if s.LimitRemaining == math.MaxUint32 {
			p += " unlimited"
		}
		parts = append(parts, p)
	}
	return r.OverallCode.String() + " [" + strings.Join(parts, ", ") + "]"
}

func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b)
		})
	}
}

const basic = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 5
  - key: remote_address
    value: 192.0.2.66
    rate_limit:
      unit: minute
      requests_per_unit: 0
  - key: path
    value: /api*
    rate_limit:
      unit: second
      requests_per_unit: 2
  - key: path
    value: /api/health
    rate_limit:
      unlimited: true
  - key: tenant
    descriptors:
      - key: user
        rate_limit:
          unit: hour
          requests_per_unit: 3
`

// TestFivePerMinute: exact counts, remaining and reset, then a new window.
func TestFivePerMinute(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		h := start(t, b, basic, rls.Options{})
		ip := desc("remote_address=198.51.100.7")
		steps := []struct {
			advance time.Duration
			want    string
		}{
			{0, "OK [OK 4/5m 45s]"},
			{time.Second, "OK [OK 3/5m 44s]"},
			{0, "OK [OK 2/5m 44s]"},
			{0, "OK [OK 1/5m 44s]"},
			{10 * time.Second, "OK [OK 0/5m 34s]"},
			{0, "OVER_LIMIT [OVER_LIMIT 0/5m 34s]"},
			{33*time.Second + 500*time.Millisecond, "OVER_LIMIT [OVER_LIMIT 0/5m 1s]"},
			{500 * time.Millisecond, "OK [OK 4/5m 1m0s]"}, // 10:01:00, a new window
		}
		for i, s := range steps {
			h.clock.Add(s.advance)
			if got := brief(h.ask(t, "edge", 0, ip)); got != s.want {
				t.Fatalf("step %d: got %s, want %s", i, got, s.want)
			}
		}
		// another address has its own counter
		if got := brief(h.ask(t, "edge", 0, desc("remote_address=198.51.100.8"))); got != "OK [OK 4/5m 1m0s]" {
			t.Fatalf("other address: %s", got)
		}
	})
}

// TestHitsAddend: the request's hits_addend (0 means 1), a descriptor's own
// (0 peeks), and a cost above the limit.
func TestHitsAddend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		h := start(t, b, basic, rls.Options{})
		ip := desc("remote_address=198.51.100.7")
		if got := brief(h.ask(t, "edge", 3, ip)); got != "OK [OK 2/5m 45s]" {
			t.Fatalf("hits_addend 3: %s", got)
		}
		if got := brief(h.ask(t, "edge", 3, ip)); got != "OVER_LIMIT [OVER_LIMIT 0/5m 45s]" {
			t.Fatalf("3 more of the 2 left: %s", got)
		}
		// The refused 3 were charged all the same, into debt: 6 of 5.
		peek := desc("remote_address=198.51.100.7")
		peek.HitsAddend = wrapperspb.UInt64(0)
		if got := brief(h.ask(t, "edge", 7, peek)); got != "OVER_LIMIT [OVER_LIMIT 0/5m 45s]" {
			t.Fatalf("peek: %s", got)
		}
		two := desc("remote_address=198.51.100.8")
		two.HitsAddend = wrapperspb.UInt64(2)
		if got := brief(h.ask(t, "edge", 7, two)); got != "OK [OK 3/5m 45s]" {
			t.Fatalf("descriptor hits_addend 2 overrides the request's 7: %s", got)
		}
		// more than the limit could ever admit: over, not an error, and counted
		if got := brief(h.ask(t, "edge", 6, desc("remote_address=198.51.100.9"))); got != "OVER_LIMIT [OVER_LIMIT 0/5m 45s]" {
			t.Fatalf("cost 6 of 5: %s", got)
		}
		if got := brief(h.ask(t, "edge", 0, desc("remote_address=198.51.100.9"))); got != "OVER_LIMIT [OVER_LIMIT 0/5m 45s]" {
			t.Fatalf("after the impossible request: %s", got)
		}
	})
}

// TestMatching: key+value beats a wildcard beats key-only; nested
// descriptors need the exact depth; unlimited and no match.
func TestMatching(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		h := start(t, b, basic, rls.Options{})
		cases := []struct {
			d    *commonpb.RateLimitDescriptor
			want string
		}{
			{desc("remote_address=192.0.2.66"), "OVER_LIMIT [OVER_LIMIT 0/0m 45s]"}, // blocked address
			{desc("path=/api/users"), "OK [OK 1/2s 1s]"},                            // wildcard
			{desc("path=/api/users"), "OK [OK 0/2s 1s]"},                            // same value, same counter
			{desc("path=/api/orders"), "OK [OK 1/2s 1s]"},                           // each value its own counter
			{desc("path=/api/health"), "OK [OK unlimited]"},                         // exact beats wildcard
			{desc("path=/other"), "OK [OK]"},                                        // no match
			{desc("tenant=a", "user=u1"), "OK [OK 2/3h 59m45s]"},
			{desc("tenant=b", "user=u1"), "OK [OK 2/3h 59m45s]"},
			{desc("tenant=a"), "OK [OK]"},                           // too shallow
			{desc("tenant=a", "user=u1", "extra=x"), "OK [OK]"},     // too deep
			{desc("remote_address=198.51.100.1", "x=y"), "OK [OK]"}, // no nested list
			{desc(), "OK [OK]"},
		}
		for i, c := range cases {
			if got := brief(h.ask(t, "edge", 0, c.d)); got != c.want {
				t.Errorf("case %d: got %s, want %s", i, got, c.want)
			}
		}
	})
}

// TestAllOrNothing: a request refused by one descriptor charges none.
func TestAllOrNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		h := start(t, b, basic, rls.Options{})
		ip := desc("remote_address=198.51.100.7")
		api := desc("path=/api/x")
		if got := brief(h.ask(t, "edge", 0, ip, api)); got != "OK [OK 4/5m 45s, OK 1/2s 1s]" {
			t.Fatal(got)
		}
		if got := brief(h.ask(t, "edge", 0, ip, api)); got != "OK [OK 3/5m 45s, OK 0/2s 1s]" {
			t.Fatal(got)
		}
		// The path limit refuses: the address is not charged. (Its
		// limit_remaining is what the store knows without charging: 3 from
		// memstore, 0 from redisstore when its near cache answered.)
		for range 3 {
			r := h.ask(t, "edge", 0, ip, api)
			if r.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rlspb.RateLimitResponse_OK ||
				r.Statuses[1].Code != rlspb.RateLimitResponse_OVER_LIMIT {
				t.Fatal(brief(r))
			}
		}
		// a blocked descriptor refuses everything without charging
		r := h.ask(t, "edge", 0, desc("remote_address=192.0.2.66"), desc("path=/api/y"))
		if r.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rlspb.RateLimitResponse_OVER_LIMIT ||
			r.Statuses[1].Code != rlspb.RateLimitResponse_OK {
			t.Fatal(brief(r))
		}
		h.clock.Add(time.Second)
		if got := brief(h.ask(t, "edge", 0, ip, desc("path=/api/y"))); got != "OK [OK 2/5m 44s, OK 1/2s 1s]" {
			t.Fatal(got)
		}
		// the same descriptor twice is charged twice, in one step
		if got := brief(h.ask(t, "edge", 0, ip, ip)); got != "OK [OK 0/5m 44s, OK 0/5m 44s]" {
			t.Fatal(got)
		}
		if got := brief(h.ask(t, "edge", 0, ip)); got != "OVER_LIMIT [OVER_LIMIT 0/5m 44s]" {
			t.Fatal(got)
		}
	})
}

const shadowAndReplaces = `
domain: shop
descriptors:
  - key: service
    descriptors:
      - key: user
        value: alice
        shadow_mode: true
        rate_limit:
          unit: second
          requests_per_unit: 2
      - key: user
        rate_limit:
          unit: second
          requests_per_unit: 3
  - key: category
    value: books
    descriptors:
      - key: user
        rate_limit:
          name: per_user_books
          unit: minute
          requests_per_unit: 2
  - key: promo
    value: spring
    descriptors:
      - key: user
        rate_limit:
          replaces:
            - name: per_user_books
          unit: minute
          requests_per_unit: 4
`

func TestShadowMode(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		h := start(t, b, shadowAndReplaces, rls.Options{})
		alice := desc("service=auth", "user=alice")
		for i, want := range []string{
			"OK [OK 1/2s 1s]", "OK [OK 0/2s 1s]",
			"OK [OK 0/2s 1s]", "OK [OK 0/2s 1s]", // over, reported OK
		} {
			if got := brief(h.ask(t, "shop", 0, alice)); got != want {
				t.Fatalf("step %d: got %s, want %s", i, got, want)
			}
		}
		// a shadow limit does not make an enforced one refuse, nor the reverse
		bob := desc("service=auth", "user=bob")
		if got := brief(h.ask(t, "shop", 0, alice, bob)); got != "OK [OK 0/2s 1s, OK 2/3s 1s]" {
			t.Fatal(got)
		}
	})
}

func TestReplaces(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		h := start(t, b, shadowAndReplaces, rls.Options{})
		books := desc("category=books", "user=u")
		promo := desc("promo=spring", "user=u")
		// alone, the books limit applies: 2 per minute
		if got := brief(h.ask(t, "shop", 0, books)); got != "OK [OK 1/2m 45s]" {
			t.Fatal(got)
		}
		// with the promo descriptor, the books limit is replaced (neither
		// checked nor charged) and the promo's 4 apply
		for i, want := range []string{
			"OK [OK, OK 3/4m 45s]", "OK [OK, OK 2/4m 45s]", "OK [OK, OK 1/4m 45s]", "OK [OK, OK 0/4m 45s]",
			"OVER_LIMIT [OK, OVER_LIMIT 0/4m 45s]",
		} {
			if got := brief(h.ask(t, "shop", 0, books, promo)); got != want {
				t.Fatalf("step %d: got %s, want %s", i, got, want)
			}
		}
		// the books limit was untouched: 1 left
		if got := brief(h.ask(t, "shop", 0, books)); got != "OK [OK 0/2m 45s]" {
			t.Fatal(got)
		}
	})
}

func TestLimitOverride(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		h := start(t, b, basic, rls.Options{})
		d := desc("remote_address=198.51.100.7")
		d.Limit = &commonpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typepb.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(2)}
		for i, want := range []string{"OK [OK 1/2mx2 1m45s]", "OK [OK 0/2mx2 1m45s]", "OVER_LIMIT [OVER_LIMIT 0/2mx2 1m45s]"} {
			if got := brief(h.ask(t, "edge", 0, d)); got != want {
				t.Fatalf("step %d: got %s, want %s", i, got, want)
			}
		}
		// the configured limit of the same descriptor is a separate counter
		if got := brief(h.ask(t, "edge", 0, desc("remote_address=198.51.100.7"))); got != "OK [OK 4/5m 45s]" {
			t.Fatal(got)
		}
		// an override with no unit is refused
		d.Limit.Unit = typepb.RateLimitUnit_UNKNOWN
		_, err := h.client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{d}})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("unknown unit: %v", err)
		}
	})
}

func TestBadRequests(t *testing.T) {
	h := start(t, backends[0], basic, rls.Options{})
	long := strings.Repeat("x", rls.MaxLength+1)
	many := make([]*commonpb.RateLimitDescriptor, rls.MaxDescriptors+1)
	for i := range many {
		many[i] = desc("remote_address=a")
	}
	deep := make([]string, rls.MaxEntries+1)
	for i := range deep {
		deep[i] = "k=v"
	}
	cases := []struct {
		req  *rlspb.RateLimitRequest
		want string
	}{
		{&rlspb.RateLimitRequest{Descriptors: []*commonpb.RateLimitDescriptor{desc("a=b")}}, "rls: the domain must not be empty"},
		{&rlspb.RateLimitRequest{Domain: "edge"}, "rls: the request has no descriptors"},
		{&rlspb.RateLimitRequest{Domain: long, Descriptors: []*commonpb.RateLimitDescriptor{desc("a=b")}}, "rls: the domain is 1025 bytes long, more than 1024"},
		{&rlspb.RateLimitRequest{Domain: "edge", Descriptors: many}, "rls: the request has 65 descriptors, more than 64"},
		{&rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{desc(deep...)}}, "rls: descriptor 0 has 17 entries, more than 16"},
		{&rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{desc("remote_address=" + long)}}, "rls: descriptor 0: entry 0: keys and values are at most 1024 bytes"},
	}
	for i, c := range cases {
		_, err := h.client.ShouldRateLimit(context.Background(), c.req)
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != c.want {
			t.Errorf("case %d: got %v, want InvalidArgument %q", i, err, c.want)
		}
	}
	// an unknown domain limits nothing
	if got := brief(h.ask(t, "nowhere", 0, desc("remote_address=a"))); got != "OK [OK]" {
		t.Fatal(got)
	}
}

// serveGRPC serves srv on a loopback port until t ends and returns a
// client connection to it.
func serveGRPC(t *testing.T, srv *grpc.Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
