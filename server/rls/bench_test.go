package rls_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/server/rls"
)

// BenchmarkShouldRateLimit measures one decision of the service itself
// (no gRPC) on the memory store, with the RateLimit headers sluice serve
// adds by default, for the load test's two cases: a new key
// per request, and one key over its limit.
func BenchmarkShouldRateLimit(b *testing.B) {
	const cfg = `
domain: load
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: hot
    rate_limit: {unit: hour, requests_per_unit: 1}
`
	for _, counting := range []rls.Counting{rls.CountAllOrNothing, rls.CountPeer} {
		for _, kind := range []string{"many-keys", "over-limit"} {
			b.Run(counting.String()+"/"+kind, func(b *testing.B) {
				store, err := memstore.New(memstore.Config{})
				if err != nil {
					b.Fatal(err)
				}
				defer store.Close()
				c, err := rls.ParseConfig("load.yaml", []byte(cfg))
				if err != nil {
					b.Fatal(err)
				}
				svc, err := rls.New(sluice.New(store), c, rls.Options{Logger: slog.New(slog.DiscardHandler), Counting: counting, ResponseHeaders: true})
				if err != nil {
					b.Fatal(err)
				}
				defer svc.Close()
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					e := &commonpb.RateLimitDescriptor_Entry{Key: "hot", Value: "h"}
					if kind == "many-keys" {
						e = &commonpb.RateLimitDescriptor_Entry{Key: "user", Value: strconv.Itoa(i)}
					}
					req := &rlspb.RateLimitRequest{Domain: "load", Descriptors: []*commonpb.RateLimitDescriptor{{Entries: []*commonpb.RateLimitDescriptor_Entry{e}}}}
					if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
