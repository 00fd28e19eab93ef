package rls_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/server/rls"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestSwapUnderLoad: requests keep being answered, each under exactly one
// of the configurations, while Swap flips between them; run with -race.
func TestSwapUnderLoad(t *testing.T) {
	h := start(t, backends[0], "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 100000}\n", rls.Options{})
	a := h.svc.Config()
	b, err := rls.ParseConfig("b.yaml", []byte("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 200000}\n"))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var swaps atomic.Int64
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				h.svc.Swap(b)
			} else {
				h.svc.Swap(a)
			}
			swaps.Add(1)
			time.Sleep(100 * time.Microsecond)
		}
	}()
	var wg sync.WaitGroup
	seen := [2]atomic.Int64{}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 150 {
				r, err := h.client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{
					Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{desc(fmt.Sprintf("user=%d", (g*150+i)%7))}})
				if err != nil {
					t.Error(err)
					return
				}
				switch rpu := r.Statuses[0].CurrentLimit.GetRequestsPerUnit(); rpu {
				case 100000:
					seen[0].Add(1)
				case 200000:
					seen[1].Add(1)
				default:
					t.Errorf("limit %d is from neither configuration", rpu)
				}
				if r.OverallCode != rlspb.RateLimitResponse_OK {
					t.Errorf("refused: %s", brief(r))
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	if seen[0].Load() == 0 || seen[1].Load() == 0 || swaps.Load() < 10 {
		t.Fatalf("not a mix: %d under a, %d under b, %d swaps", seen[0].Load(), seen[1].Load(), swaps.Load())
	}
	h.svc.Swap(b)
	if got := h.ask(t, "edge", 0, desc("user=x")).Statuses[0].CurrentLimit.RequestsPerUnit; got != 200000 {
		t.Fatalf("after the last swap: %d", got)
	}
	h.svc.Swap(nil) // ignored
	if h.svc.Config() != b {
		t.Fatal("Swap(nil) changed the configuration")
	}
}

func headerMap(r *rlspb.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		m[h.Key] = h.Value
	}
	return m
}

func TestResponseHeaders(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		h := start(t, b, basic+`  - key: plan
    rate_limit:
      name: plan-quota
      unit: second
      requests_per_unit: 10
      sluice: {algorithm: token_bucket, burst: 20}
`, rls.Options{ResponseHeaders: true})
		ip, api, plan := desc("remote_address=198.51.100.7"), desc("path=/api/x"), desc("plan=free")
		r := h.ask(t, "edge", 0, ip, api, plan, desc("path=/api/health"))
		want := map[string]string{
			"RateLimit-Policy": `"remote_address";q=5;w=60, "path=/api*";q=2;w=1, "plan-quota";q=20;w=2`,
			"RateLimit":        `"remote_address";r=4;t=45, "path=/api*";r=1;t=1, "plan-quota";r=19;t=1`,
		}
		if got := headerMap(r); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %v\nwant %v", got, want)
		}
		h.ask(t, "edge", 0, api)
		r = h.ask(t, "edge", 0, api)
		want = map[string]string{
			"RateLimit-Policy": `"path=/api*";q=2;w=1`,
			"RateLimit":        `"path=/api*";r=0;t=1`,
			"Retry-After":      "1",
		}
		if got := headerMap(r); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %v\nwant %v", got, want)
		}
		// nothing limited: no headers
		if got := h.ask(t, "edge", 0, desc("other=x")).ResponseHeadersToAdd; len(got) != 0 {
			t.Fatalf("headers without limits: %v", got)
		}
	})
}

// TestObserveAndShadowLog: one Outcome per descriptor, and shadow refusals
// logged as one aggregated line, not one per request.
func TestObserveAndShadowLog(t *testing.T) {
	var mu sync.Mutex
	var got []string
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&syncWriter{w: &buf}, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	h := start(t, backends[0], shadowAndReplaces, rls.Options{Logger: log, LogInterval: time.Hour,
		Observe: func(domain string, o rls.Outcome) {
			mu.Lock()
			lim := "-"
			if o.Limit.Algorithm != 0 {
				lim = o.Limit.String()
			}
			got = append(got, fmt.Sprintf("%s %q %s shadow=%t hits=%d %s", domain, o.Rule, o.Result, o.Shadow, o.Hits, lim))
			mu.Unlock()
		}})
	alice := desc("service=auth", "user=alice")
	for range 5 {
		h.ask(t, "shop", 0, alice)
	}
	h.ask(t, "shop", 0, desc("category=books", "user=u"), desc("promo=spring", "user=u"), desc("nothing=here"))
	h.ask(t, "nowhere", 0, desc("a=b"))
	h.svc.Close() // writes what is pending
	want := []string{
		`shop "service/user=alice" ok shadow=true hits=1 fixed_window(2 per 1s)`,
		`shop "service/user=alice" ok shadow=true hits=1 fixed_window(2 per 1s)`,
		`shop "service/user=alice" shadow_over_limit shadow=true hits=1 fixed_window(2 per 1s)`,
		`shop "service/user=alice" shadow_over_limit shadow=true hits=1 fixed_window(2 per 1s)`,
		`shop "service/user=alice" shadow_over_limit shadow=true hits=1 fixed_window(2 per 1s)`,
		`shop "category=books/user" replaced shadow=false hits=1 fixed_window(2 per 1m)`,
		`shop "promo=spring/user" ok shadow=false hits=1 fixed_window(4 per 1m)`,
		`shop "" no_limit shadow=false hits=1 -`,
		`nowhere "" no_limit shadow=false hits=1 -`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("outcomes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	logs := buf.String()
	wantLogs := `level=INFO msg="rls: configuration loaded" domains="shop (test.yaml, 4 limits)"
level=INFO msg="rls: shadow_mode limit over, admitted" domain=shop descriptor="service/user=alice" count=3 interval=1h0m0s
level=WARN msg="rls: requests for unknown domains answered OK without limits" count=1 example=nowhere interval=1h0m0s
`
	if logs != wantLogs {
		t.Errorf("logs:\n%s\nwant:\n%s", logs, wantLogs)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// envoyFixedWindow is envoyproxy/ratelimit's fixed window as its README and
// code describe it, written out as a reference: a counter per descriptor
// per window aligned to the unit since the Unix epoch (time in whole
// seconds), incremented by every request's hits whether or not it is over;
// over when the count after the increment exceeds the limit; remaining
// limit-count when not over; duration_until_reset the seconds left in the
// window.
type envoyFixedWindow struct {
	counts map[string]uint64
}

func (m *envoyFixedWindow) decide(key string, now time.Time, rpu, unit, hits uint64) string {
	sec := uint64(now.Unix())
	k := fmt.Sprintf("%s_%d", key, sec/unit)
	m.counts[k] += hits
	after := m.counts[k]
	reset := unit - sec%unit
	if after > rpu {
		return fmt.Sprintf("OVER_LIMIT 0 %s", time.Duration(reset)*time.Second)
	}
	return fmt.Sprintf("OK %d %s", rpu-after, time.Duration(reset)*time.Second)
}

// TestSameDecisionsAsEnvoyFixedWindow replays one random timeline of
// single-descriptor, unit-cost requests (several keys, two limits) through
// the service and through the reference model: every code, limit_remaining
// and duration_until_reset must agree.
func TestSameDecisionsAsEnvoyFixedWindow(t *testing.T) {
	cfg := `
domain: cmp
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 3}
`
	forEachBackend(t, func(t *testing.T, b backend) {
		h := start(t, b, cfg, rls.Options{})
		model := &envoyFixedWindow{counts: map[string]uint64{}}
		rng := rand.New(rand.NewPCG(7, 11))
		for i := range 600 {
			h.clock.Add(time.Duration(rng.IntN(700_000)) * time.Microsecond)
			now := h.clock.Now()
			var d *commonpb.RateLimitDescriptor
			var want string
			if rng.IntN(2) == 0 {
				v := fmt.Sprintf("10.0.0.%d", rng.IntN(3))
				d, want = desc("ip="+v), model.decide("ip_"+v, now, 5, 60, 1)
			} else {
				v := fmt.Sprintf("u%d", rng.IntN(2))
				d, want = desc("user="+v), model.decide("user_"+v, now, 3, 1, 1)
			}
			s := h.ask(t, "cmp", 0, d).Statuses[0]
			got := fmt.Sprintf("%s %d %s", s.Code, s.LimitRemaining, s.DurationUntilReset.AsDuration())
			if got != want {
				t.Fatalf("request %d at %s: service %q, envoyproxy model %q", i, now.Format("15:04:05.000000"), got, want)
			}
		}
	})
}

// TestRefusedHitsCountAsInEnvoy: the reference charges a refused request's
// hits to its counter, and so does sluice's default counting (into a
// bounded debt), so a later request that would fit what the admitted ones
// left is refused in both.
func TestRefusedHitsCountAsInEnvoy(t *testing.T) {
	h := start(t, backends[0], "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n", rls.Options{})
	model := &envoyFixedWindow{counts: map[string]uint64{}}
	steps := []struct {
		hits        uint32
		rls, envoyM string
	}{
		{3, "OK 2 45s", "OK 2 45s"},
		{4, "OVER_LIMIT 0 45s", "OVER_LIMIT 0 45s"},
		{2, "OVER_LIMIT 0 45s", "OVER_LIMIT 0 45s"}, // 3+4+2 > 5
	}
	for i, s := range steps {
		st := h.ask(t, "d", s.hits, desc("k=v")).Statuses[0]
		got := fmt.Sprintf("%s %d %s", st.Code, st.LimitRemaining, st.DurationUntilReset.AsDuration())
		m := model.decide("k_v", h.clock.Now(), 5, 60, uint64(s.hits))
		if got != s.rls || m != s.envoyM {
			t.Fatalf("step %d: service %q (want %q), model %q (want %q)", i, got, s.rls, m, s.envoyM)
		}
	}
}

// TestStoreFailure: a store that fails answers Unavailable (Envoy then
// applies failure_mode_deny), and the failures are logged aggregated.
func TestStoreFailure(t *testing.T) {
	var buf bytes.Buffer
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := rls.ParseConfig("t.yaml", []byte(basic))
	svc, err := rls.New(sluice.New(store), cfg, rls.Options{Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &buf}, nil)), LogInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	store.Close()
	req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{desc("remote_address=a")}}
	for range 3 {
		_, err := svc.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("got %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := svc.ShouldRateLimit(ctx, req); status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled: %v", err)
	}
	svc.Close()
	if n := strings.Count(buf.String(), "store errors answered Unavailable"); n != 1 || !strings.Contains(buf.String(), "count=3") {
		t.Fatalf("logs:\n%s", buf.String())
	}
}

// TestCalendarMonth: unit month with a timezone in the sluice block is the
// calendar month of that zone, not 30 days from the epoch: its
// duration_until_reset runs to midnight of the 1st, Berlin time, on every
// store.
func TestCalendarMonth(t *testing.T) {
	for _, c := range []rls.Counting{rls.CountAllOrNothing, rls.CountPeer} {
		t.Run(c.String(), func(t *testing.T) { testCalendarMonth(t, c) })
	}
}

func testCalendarMonth(t *testing.T, counting rls.Counting) {
	cfg := `
domain: cal
descriptors:
  - key: tenant
    rate_limit:
      unit: month
      requests_per_unit: 2
      sluice: {timezone: Europe/Berlin}
`
	forEachBackend(t, func(t *testing.T, b backend) {
		h := start(t, b, cfg, rls.Options{Counting: counting})
		// t0 is 2 March 2026, 10:00:15 UTC, 11:00:15 in Berlin; April
		// starts at 22:00 UTC on 31 March, after the change to summer time.
		untilApril := time.Date(2026, 3, 31, 22, 0, 0, 0, time.UTC).Sub(t0)
		var got []string
		for range 3 {
			s := h.ask(t, "cal", 0, desc("tenant=acme")).Statuses[0]
			got = append(got, fmt.Sprintf("%s %d %s", s.Code, s.LimitRemaining, s.DurationUntilReset.AsDuration()))
		}
		h.clock.Add(untilApril)
		s := h.ask(t, "cal", 0, desc("tenant=acme")).Statuses[0]
		got = append(got, fmt.Sprintf("%s %d %s", s.Code, s.LimitRemaining, s.DurationUntilReset.AsDuration()))
		want := []string{
			fmt.Sprintf("OK 1 %s", untilApril), fmt.Sprintf("OK 0 %s", untilApril), fmt.Sprintf("OVER_LIMIT 0 %s", untilApril),
			fmt.Sprintf("OK 1 %s", 30*24*time.Hour),
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

// TestVersionOnSwap: a new configuration that raises a limit keeps each
// counter's usage, as the YAML policy does; one that changes the sluice
// block's version starts every counter afresh, counted as sluice does or
// as envoyproxy/ratelimit does.
func TestVersionOnSwap(t *testing.T) {
	for _, c := range []rls.Counting{rls.CountAllOrNothing, rls.CountPeer} {
		t.Run(c.String(), func(t *testing.T) { testVersionOnSwap(t, c) })
	}
}

func testVersionOnSwap(t *testing.T, counting rls.Counting) {
	cfg := func(n int, version string) *rls.Config {
		src := fmt.Sprintf("domain: v\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: %d%s}\n", n, version)
		c, err := rls.ParseConfig("v.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		h := startConfig(t, b, cfg(3, ""), rls.Options{Counting: counting})
		var got []string
		step := func() { got = append(got, brief(h.ask(t, "v", 0, desc("user=ann")))) }
		step()
		step()
		step()
		h.svc.Swap(cfg(4, ", sluice: {version: 0}")) // 0 is the default: the same counter
		step()
		step()
		h.svc.Swap(cfg(4, ", sluice: {version: 1}"))
		step()
		want := []string{
			"OK [OK 2/3h 59m45s]", "OK [OK 1/3h 59m45s]", "OK [OK 0/3h 59m45s]",
			"OK [OK 0/4h 59m45s]", "OVER_LIMIT [OVER_LIMIT 0/4h 59m45s]",
			"OK [OK 3/4h 59m45s]",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}
