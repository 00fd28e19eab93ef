package rls_test

import (
	"context"
	"fmt"
	"log/slog"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/server/rls"
)

func Example() {
	cfg, err := rls.ParseConfig("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 2
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	svc, err := rls.New(sluice.New(store), cfg, rls.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer svc.Close()
	// In a server: svc.Register(grpc.NewServer(rls.ServerCodec())). Here,
	// called directly.
	req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{{
		Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "203.0.113.7"}},
	}}}
	for range 3 {
		resp, _ := svc.ShouldRateLimit(context.Background(), req)
		fmt.Println(resp.OverallCode, resp.Statuses[0].LimitRemaining)
	}
	// Output:
	// OK 1
	// OK 0
	// OVER_LIMIT 0
}

func ExampleParseConfig() {
	_, err := rls.ParseConfig("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: sec
      requests_per_unit: 10
`))
	fmt.Println(err)
	// Output:
	// rls: invalid config:
	// edge.yaml:6: domain "edge": descriptor remote_address: rate_limit.unit: unknown unit "sec" (want second, minute, hour, day, week, month or year)
}

func ExampleLoadConfig() {
	cfg, err := rls.LoadConfig("testdata/dir")
	fmt.Println(cfg.Domains(), err)
	// Output:
	// [edge mongo_cps] <nil>
}

// ExampleCounting: the same requests counted sluice's way and
// envoyproxy/ratelimit's (CountPeer): a request refused by its user limit
// charges its ip limit only under CountPeer, so 4 more hits on the ip fit
// under all-or-nothing and are over under CountPeer.
func ExampleCounting() {
	cfg, err := rls.ParseConfig("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: ip
    rate_limit: {unit: day, requests_per_unit: 5}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, counting := range []rls.Counting{rls.CountAllOrNothing, rls.CountPeer} {
		store, _ := memstore.New(memstore.Config{})
		svc, err := rls.New(sluice.New(store), cfg, rls.Options{Logger: slog.New(slog.DiscardHandler), Counting: counting})
		if err != nil {
			panic(err)
		}
		fmt.Print(counting, ":")
		user := &commonpb.RateLimitDescriptor{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "user", Value: "u1"}}}
		ip := &commonpb.RateLimitDescriptor{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "ip", Value: "192.0.2.1"}}}
		for _, req := range []struct {
			hits  uint32
			descs []*commonpb.RateLimitDescriptor
		}{
			{4, []*commonpb.RateLimitDescriptor{user}},
			{2, []*commonpb.RateLimitDescriptor{user, ip}}, // user refuses: is ip charged?
			{4, []*commonpb.RateLimitDescriptor{ip}},
		} {
			resp, _ := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge", HitsAddend: req.hits, Descriptors: req.descs})
			fmt.Print(" ", resp.OverallCode)
		}
		fmt.Println()
		svc.Close()
		store.Close()
	}
	// Output:
	// all-or-nothing: OK OVER_LIMIT OK
	// peer: OK OVER_LIMIT OVER_LIMIT
}

// The limits a configuration defines, for metrics that start from zero.
func ExampleConfig_Limits() {
	cfg, err := rls.ParseConfig("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: generic_key
    value: login
    descriptors:
      - key: remote_address
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tenant
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 100}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, l := range cfg.Limits() {
		fmt.Printf("%s/%s shadow=%t\n", l.Domain, l.Path, l.Shadow)
	}
	// Output:
	// edge/generic_key=login/remote_address shadow=false
	// edge/tenant shadow=true
}
