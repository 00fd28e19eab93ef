//go:build servebench

package bench_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestServeTokenPattern runs Envoy's token limiting against
// envoyproxy/ratelimit (RLS_PEER_BIN, on its own Redis) and sluice serve
// (default and --rls-counting peer, memory and Redis stores), with the
// same config (rlsLoadConfig's tokens: 1,000 an hour): each call checks its
// descriptor with hits_addend 0 when it starts and, if admitted, sends the
// 300 tokens it used when its stream ends (the answer ignored, as Envoy
// ignores it). It logs how many of 8 calls each service admits; sluice must
// admit no more than the peer. SLUICE_LOAD_BASE_BIN, if set, names another
// sluice binary (an older commit's), run beside as "sluice base" (logged,
// not held to the bound).
func TestServeTokenPattern(t *testing.T) {
	type service struct{ label, addr string }
	var svcs []service
	if bin := os.Getenv("RLS_PEER_BIN"); bin != "" {
		addr, _, _ := startPeer(t, bin)
		svcs = append(svcs, service{"envoyproxy/ratelimit (Redis)", addr})
	}
	bins := []struct{ label, path string }{{"sluice", sluiceBinary(t)}}
	if base := os.Getenv("SLUICE_LOAD_BASE_BIN"); base != "" { // another commit's sluice, measured beside
		bins = append(bins, struct{ label, path string }{"sluice base", base})
	}
	for _, bin := range bins {
		for _, store := range []string{"memory", "redis"} {
			svcs = append(svcs, service{bin.label + " all-or-nothing (" + store + ")", startSluiceBin(t, bin.path, "http://127.0.0.1:1", store).grpc},
				service{bin.label + " --rls-counting peer (" + store + ")", startSluiceBin(t, bin.path, "http://127.0.0.1:1", store, "--rls-counting", "peer").grpc})
		}
	}
	value := fmt.Sprint("caller-", time.Now().UnixNano()) // a fresh counter for this run
	counts := map[string]int{}
	for _, s := range svcs {
		client := rlsClients(t, s.addr)[0]
		ask := func(hits uint64) rlspb.RateLimitResponse_Code {
			d := &commonpb.RateLimitDescriptor{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "tokens", Value: value}}, HitsAddend: wrapperspb.UInt64(hits)}
			resp, err := client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "load", Descriptors: []*commonpb.RateLimitDescriptor{d}})
			if err != nil {
				t.Fatalf("%s: %v", s.label, err)
			}
			return resp.OverallCode
		}
		admitted, pattern := 0, ""
		for range 8 {
			if ask(0) != rlspb.RateLimitResponse_OK {
				pattern += "-"
				continue
			}
			admitted++
			pattern += "+"
			ask(300)
		}
		counts[s.label] = admitted
		t.Logf("%-40s %d of 8 calls admitted (%s)", s.label, admitted, pattern)
	}
	if peer, ok := counts["envoyproxy/ratelimit (Redis)"]; ok {
		for label, n := range counts {
			if n > peer && !strings.HasPrefix(label, "sluice base") {
				t.Errorf("%s admitted %d calls, more than envoyproxy/ratelimit's %d", label, n, peer)
			}
		}
	}
}
