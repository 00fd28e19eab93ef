package rls_test

import (
	"bytes"
	"context"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sluicehq/sluice/server/rls"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// tokenBudget is the configuration Envoy Gateway's users write to limit
// LLM tokens: a plain descriptor whose requests_per_unit is the budget.
const tokenBudget = "domain: ai\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n"

// hitsDesc is a descriptor with its own hits_addend.
func hitsDesc(hits uint64, kv ...string) *commonpb.RateLimitDescriptor {
	d := desc(kv...)
	d.HitsAddend = wrapperspb.UInt64(hits)
	return d
}

// TestEnvoyTokenPattern: Envoy's token limiting checks a descriptor with
// hits_addend 0 when a call starts, and sends the tokens used with the
// same descriptor when its stream ends, ignoring that answer. With 1,000
// tokens an hour and calls of 300, envoyproxy/ratelimit admits 4 calls
// (its counter goes 300, 600, 900, 1200; a start at 1200 is over); both
// countings must admit no more, on every store, and the refused
// stream-end charge must count, also under a sluice algorithm (a token
// bucket of the same budget).
func TestEnvoyTokenPattern(t *testing.T) {
	bucket := strings.Replace(tokenBudget, "1000}", "1000, sluice: {algorithm: token_bucket, burst: 1000}}", 1)
	// After a flood of stream-end charges: a fixed window is over until
	// it ends (45 min 15 s in, a new window starts empty); the bucket owes
	// at most 4 budgets past empty: 4 hours of refill until a look is OK,
	// 5 until it is full.
	const window, fullDebt = "OVER_LIMIT [OVER_LIMIT 0/1000h 59m45s]", "OVER_LIMIT [OVER_LIMIT 0/1000h 5h0m0s]"
	for _, c := range []struct {
		name     string
		config   string
		counting rls.Counting
		flooded  string
		paid     time.Duration // until a look is OK again
		quota    bool          // Options.QuotaMode
	}{
		{"all-or-nothing", tokenBudget, rls.CountAllOrNothing, window, time.Hour, false},
		{"all-or-nothing quota_mode", tokenBudget, rls.CountAllOrNothing, window, time.Hour, true},
		{"peer quota_mode", tokenBudget, rls.CountPeer, window, time.Hour, true},
		{"peer", tokenBudget, rls.CountPeer, window, time.Hour, false},
		{"all-or-nothing token_bucket", bucket, rls.CountAllOrNothing, fullDebt, 4 * time.Hour, false},
		{"peer token_bucket", bucket, rls.CountPeer, fullDebt, 4 * time.Hour, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) {
				h := start(t, b, c.config, rls.Options{Counting: c.counting, QuotaMode: c.quota})
				model := &envoyFixedWindow{counts: map[string]uint64{}}
				admitted, peerAdmitted := 0, 0
				for range 8 {
					startCall := h.ask(t, "ai", 0, hitsDesc(0, "user=u1"))
					if model.decide("user_u1", h.clock.Now(), 1000, 3600, 0)[:2] == "OK" {
						peerAdmitted++
					}
					if startCall.OverallCode != rlspb.RateLimitResponse_OK {
						continue // the call is refused: it uses no tokens
					}
					admitted++
					h.ask(t, "ai", 0, hitsDesc(300, "user=u1")) // the answer is ignored
					model.decide("user_u1", h.clock.Now(), 1000, 3600, 300)
				}
				if peerAdmitted != 4 || admitted > peerAdmitted {
					t.Fatalf("admitted %d calls, envoyproxy/ratelimit %d (want 4, sluice at most as many)", admitted, peerAdmitted)
				}
				// The debt is bounded: a flood of stream-end charges leaves
				// the key refused, never an error.
				for range 100 {
					h.ask(t, "ai", 0, hitsDesc(1<<40, "user=u1"))
				}
				if got := brief(h.ask(t, "ai", 0, hitsDesc(0, "user=u1"))); got != c.flooded {
					t.Fatalf("after the flood: %s, want %s", got, c.flooded)
				}
				h.clock.Add(c.paid - time.Minute) // the fixed windows' next window starts 45 min 15 s in
				if got := h.ask(t, "ai", 0, hitsDesc(0, "user=u1")).OverallCode; got != rlspb.RateLimitResponse_OVER_LIMIT && c.paid > time.Hour {
					t.Fatalf("the debt paid back a minute early: %s", got)
				}
				h.clock.Add(2 * time.Minute)
				if got := h.ask(t, "ai", 0, hitsDesc(0, "user=u1")).OverallCode; got != rlspb.RateLimitResponse_OK {
					t.Fatalf("after %s: %s", c.paid, got)
				}
			})
		})
	}
}

// TestRefusedDescriptorAloneIsCharged: under all-or-nothing the
// descriptor that refuses is charged its hits, the others of the request
// are not.
func TestRefusedDescriptorAloneIsCharged(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		h := start(t, b, basic, rls.Options{})
		user := desc("tenant=t", "user=u")
		h.ask(t, "edge", 3, user) // 3 of 3 an hour
		got := brief(h.ask(t, "edge", 2, desc("remote_address=198.51.100.1"), user))
		if got != "OVER_LIMIT [OK 5/5m 45s, OVER_LIMIT 0/3h 59m45s]" && got != "OVER_LIMIT [OK 0/5m 45s, OVER_LIMIT 0/3h 59m45s]" {
			t.Fatalf("user over: %s", got)
		}
		if got := brief(h.ask(t, "edge", 5, desc("remote_address=198.51.100.1"))); got != "OK [OK 0/5m 45s]" {
			t.Fatalf("the address was not charged: %s", got)
		}
		h.clock.Add(time.Hour)
		if got := brief(h.ask(t, "edge", 3, user)); got != "OK [OK 0/3h 59m45s]" {
			t.Fatalf("the next hour starts empty (a fixed window's debt ends with it): %s", got)
		}
	})
}

// TestNegativeHits: is_negative_hits gives hits back to the descriptor's
// counter, in both countings, never below empty: a client cannot make room
// beyond the limit by giving back more than was used.
func TestNegativeHits(t *testing.T) {
	for _, counting := range []rls.Counting{rls.CountAllOrNothing, rls.CountPeer} {
		t.Run(counting.String(), func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) {
				h := start(t, b, tokenBudget, rls.Options{Counting: counting})
				give := func(n uint64, user string) *commonpb.RateLimitDescriptor {
					d := hitsDesc(n, user)
					d.IsNegativeHits = true
					return d
				}
				steps := []struct {
					d    *commonpb.RateLimitDescriptor
					want string
				}{
					{hitsDesc(700, "user=u1"), "OK [OK 300/1000h 59m45s]"},
					{give(200, "user=u1"), "OK [OK 500/1000h 59m45s]"},
					{hitsDesc(500, "user=u1"), "OK [OK 0/1000h 59m45s]"},
					{give(1<<62, "user=u1"), "OK [OK 1000/1000h 59m45s]"}, // never below empty
					{hitsDesc(1000, "user=u1"), "OK [OK 0/1000h 59m45s]"},
					{hitsDesc(1, "user=u1"), "OVER_LIMIT [OVER_LIMIT 0/1000h 59m45s]"},
				}
				for i, s := range steps {
					if got := brief(h.ask(t, "ai", 0, s.d)); got != s.want {
						t.Fatalf("step %d: got %s, want %s", i, got, s.want)
					}
				}
				// a refund and a charge of one counter in one request: the
				// refund first
				h.clock.Add(time.Hour)
				h.ask(t, "ai", 0, hitsDesc(1000, "user=u2"))
				if got := brief(h.ask(t, "ai", 0, give(400, "user=u2"), desc("user=u2"))); got != "OK [OK 400/1000h 59m45s, OK 399/1000h 59m45s]" {
					t.Fatalf("refund then charge: %s", got)
				}
			})
		})
	}
}

// TestPeerOverrideCounter: under CountPeer a descriptor's own limit counts
// where envoyproxy/ratelimit counts it: on the counter of its entries and
// window (src/limiter/cache_key.go), so apart from a configured limit of
// another unit (basic_config's key1=value1,subkey1 is per second; the
// override per day answers 9 after one hit, as its config_test's
// descriptor) and together with one of the same unit.
func TestPeerOverrideCounter(t *testing.T) {
	cfg, err := rls.LoadConfig("testdata/peer/config/basic_config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	override := func(rpu uint32, unit typepb.RateLimitUnit, kv ...string) *commonpb.RateLimitDescriptor {
		d := desc(kv...)
		d.Limit = &commonpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		return d
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		h := startConfig(t, b, cfg, rls.Options{Counting: rls.CountPeer})
		sub := []string{"key1=value1", "subkey1=something"}
		steps := []struct {
			d    *commonpb.RateLimitDescriptor
			want string
		}{
			{desc(sub...), "OK [OK 4/5s 1s]"},
			{override(10, typepb.RateLimitUnit_DAY, sub...), "OK [OK 9/10d 13h59m45s]"},
			{override(10, typepb.RateLimitUnit_DAY, sub...), "OK [OK 8/10d 13h59m45s]"},
			{override(42, typepb.RateLimitUnit_HOUR, sub...), "OK [OK 41/42h 59m45s]"},
			{desc("key2=value2"), "OK [OK 29/30m 45s]"}, // basic_config: key2=value2 30/minute
			{override(10, typepb.RateLimitUnit_MINUTE, "key2=value2"), "OK [OK 8/10m 45s]"},
			{desc("key2=value2"), "OK [OK 27/30m 45s]"},
		}
		for i, s := range steps {
			if got := brief(h.ask(t, "test-domain", 0, s.d)); got != s.want {
				t.Errorf("step %d: got %s, want %s", i, got, s.want)
			}
		}
	})
}

// TestBounds: Options.Bounds replaces the default bounds on a request,
// lower or higher, in the service and in its codec over gRPC; bounds out of
// range are refused.
func TestBounds(t *testing.T) {
	many := func(n int, kv ...string) []*commonpb.RateLimitDescriptor {
		ds := make([]*commonpb.RateLimitDescriptor, n)
		for i := range ds {
			ds[i] = desc(kv...)
		}
		return ds
	}
	low := start(t, backends[0], basic, rls.Options{Bounds: rls.Bounds{Descriptors: 2, Entries: 2, Length: 8}})
	high := start(t, backends[0], basic, rls.Options{Bounds: rls.Bounds{Descriptors: 100, Entries: 20, Length: 2000}})
	for _, c := range []struct {
		h    *harness
		req  *rlspb.RateLimitRequest
		want string // "" answered
	}{
		{low, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: many(2, "tenant=t", "user=u")}, ""},
		{low, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: many(3, "a=b")}, "rls: the request has 3 descriptors, more than 2"},
		{low, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: many(1, "a=b", "c=d", "e=f")}, "rls: descriptor 0 has 3 entries, more than 2"},
		{low, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: many(1, "a=123456789")}, "rls: descriptor 0: entry 0: keys and values are at most 8 bytes"},
		{low, &rlspb.RateLimitRequest{Domain: "edge-12345", Descriptors: many(1, "a=b")}, "rls: the domain is 10 bytes long, more than 8"},
		{high, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: many(100, "a=1", "b=2", "c=3", "d=4", "e=5", "f=6", "g=7", "h=8", "i=9", "j=10", "k=11", "l=12", "m=13", "n=14", "o=15", "p=16", "q=17")}, ""},
		{high, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: many(1, "remote_address="+strings.Repeat("1", 2000))}, ""},
		{high, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: many(101, "a=b")}, "rls: the request has 101 descriptors, more than 100"},
	} {
		_, err := c.h.client.ShouldRateLimit(context.Background(), c.req)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%d descriptors: %v", len(c.req.Descriptors), err)
		case c.want != "" && (status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != c.want):
			t.Errorf("got %v, want InvalidArgument %q", err, c.want)
		}
	}
	for _, b := range []rls.Bounds{{Descriptors: -1}, {Descriptors: 1025}, {Entries: 65}, {Length: 64<<10 + 1}} {
		if err := b.Check(); err == nil {
			t.Errorf("%+v: no error", b)
		}
	}
	if err := (rls.Bounds{Descriptors: 1024, Entries: 64, Length: 64 << 10}).Check(); err != nil {
		t.Error(err)
	}
}

// TestNewRejects: New answers bad input with an error, never a panic: Bounds
// out of range, and a nil limiter.
func TestNewRejects(t *testing.T) {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lim := sluice.New(store)
	for _, c := range []struct {
		name    string
		limiter *sluice.Limiter
		opts    rls.Options
		want    string
	}{
		{"bounds", lim, rls.Options{Bounds: rls.Bounds{Entries: 65}}, "rls: request bounds: entries 65"},
		{"nil limiter", nil, rls.Options{}, "rls: "},
	} {
		svc, err := rls.New(c.limiter, nil, c.opts)
		if svc != nil || err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: got %v, %v; want an error starting %q", c.name, svc, err, c.want)
		}
	}
}

// TestPeerCountingThroughDecide: under CountPeer every charge goes through
// package decide, the decision path of every front-end, so a refusal is
// in its aggregated refusal log, as under all-or-nothing (the peer's second
// request fills the over mark, admitted by the store; the third is the
// store's refusal).
func TestPeerCountingThroughDecide(t *testing.T) {
	for _, counting := range []rls.Counting{rls.CountAllOrNothing, rls.CountPeer} {
		t.Run(counting.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store, err := memstore.New(memstore.Config{SweepInterval: -1})
				if err != nil {
					t.Fatal(err)
				}
				defer store.Close()
				cfg, err := rls.ParseConfig("t.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"))
				if err != nil {
					t.Fatal(err)
				}
				var out bytes.Buffer
				buf := &syncWriter{w: &out}
				svc, err := rls.New(sluice.New(store), cfg, rls.Options{Counting: counting, Logger: slog.New(slog.NewTextHandler(buf, nil))})
				if err != nil {
					t.Fatal(err)
				}
				defer svc.Close()
				req := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*commonpb.RateLimitDescriptor{desc("k=v")}}
				for _, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT, rlspb.RateLimitResponse_OVER_LIMIT} {
					if resp, err := svc.ShouldRateLimit(context.Background(), req); err != nil || resp.OverallCode != want {
						t.Fatalf("%v %v, want %v", resp, err, want)
					}
				}
				time.Sleep(2 * time.Second) // the refusal log's interval, on the bubble's clock
				synctest.Wait()
				buf.mu.Lock()
				defer buf.mu.Unlock()
				if got := out.String(); !strings.Contains(got, "rls: refused requests") || !strings.Contains(got, "by_limit.k=") {
					t.Errorf("no refusal logged by decide:\n%s", got)
				}
			})
		})
	}
}

// adjustCounter is a store that counts the adjustments it is asked for.
type adjustCounter struct {
	sluice.Store
	n atomic.Int64
}

func (s *adjustCounter) Adjust(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	s.n.Add(1)
	return s.Store.(sluice.Adjuster).Adjust(ctx, r)
}

// TestSpentWindowCostsNoCharge: a fixed window that has nothing left
// refuses everything until it ends, so its refused hits are not charged
// again: the token pattern makes one adjustment (the stream end that went
// over), and a flood of refused charges after it none, so a spent key
// hammered costs no store round trip (redisstore's near cache answers).
func TestSpentWindowCostsNoCharge(t *testing.T) {
	for _, counting := range []rls.Counting{rls.CountAllOrNothing, rls.CountPeer} {
		t.Run(counting.String(), func(t *testing.T) {
			mem, err := memstore.New(memstore.Config{SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			store := &adjustCounter{Store: mem}
			cfg, err := rls.ParseConfig("t.yaml", []byte(tokenBudget))
			if err != nil {
				t.Fatal(err)
			}
			svc, err := rls.New(sluice.New(store), cfg, rls.Options{Counting: counting, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Close()
			ask := func(hits uint64) rlspb.RateLimitResponse_Code {
				resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "ai", Descriptors: []*commonpb.RateLimitDescriptor{hitsDesc(hits, "user=u1")}})
				if err != nil {
					t.Fatal(err)
				}
				return resp.OverallCode
			}
			for _, hits := range []uint64{300, 300, 300, 300} {
				ask(hits)
			}
			for range 100 {
				if ask(300) != rlspb.RateLimitResponse_OVER_LIMIT {
					t.Fatal("a spent window admitted a charge")
				}
			}
			if n := store.n.Load(); n > 1 {
				t.Errorf("%d adjustments, want at most 1 (the charge that went over)", n)
			}
		})
	}
}
