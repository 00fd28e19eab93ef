package rls_test

import (
	"fmt"
	"strings"
	"testing"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/server/rls"
)

// TestUpstreamGlobalQuotaMode: Options.QuotaMode answers as
// envoyproxy/ratelimit with QUOTA_MODE=true (src/service/ratelimit.go,
// shouldRateLimitWorker, at f2fb157; its TestServiceGlobalQuotaMode is the
// first case): every limit is a quota limit, so the request is OVER_LIMIT
// only when every descriptor is, unlimited ones left out; a descriptor no
// limit matches, or a shadow_mode limit over (OK there), keeps it OK. The
// descriptors keep their own codes, and each is charged on its own in
// both countings.
func TestUpstreamGlobalQuotaMode(t *testing.T) {
	const cfg = `
domain: d
descriptors:
  - key: reg
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: reg2
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: q
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: sh
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: un
    rate_limit: {unlimited: true}
`
	cases := []struct {
		name  string
		descs []string // "k=over" is spent by a first request; "k=under" is not
		want  string   // overall and descriptor codes; then the next request's
	}{
		{"AllOver", []string{"reg=over", "reg2=over"}, "OVER_LIMIT OVER_LIMIT OVER_LIMIT"},
		{"SomeOver", []string{"reg=over", "reg2=under"}, "OK OVER_LIMIT OK"},
		{"PerDescriptorQuotaToo", []string{"reg=over", "q=over"}, "OVER_LIMIT OVER_LIMIT OVER_LIMIT"},
		{"NoLimitMatched", []string{"reg=over", "nomatch=x"}, "OK OVER_LIMIT OK"},
		{"UnlimitedLeftOut", []string{"reg=over", "un=x"}, "OVER_LIMIT OVER_LIMIT OK"},
		{"ShadowOverIsOK", []string{"reg=over", "sh=over"}, "OK OVER_LIMIT OK"},
		{"OnlyUnlimited", []string{"un=x"}, "OK OK"},
		{"AllUnder", []string{"reg=under", "reg2=under"}, "OK OK OK"},
	}
	for _, counting := range []rls.Counting{rls.CountAllOrNothing, rls.CountPeer} {
		t.Run(fmt.Sprint(counting), func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) {
				for _, c := range cases {
					h := start(t, b, cfg, rls.Options{Counting: counting, QuotaMode: true})
					var ds []*commonpb.RateLimitDescriptor
					for _, d := range c.descs {
						if strings.HasSuffix(d, "=over") {
							h.ask(t, "d", 0, desc(d))
						}
						ds = append(ds, desc(d))
					}
					if got := statusCodes(h.ask(t, "d", 0, ds...)); got != c.want {
						t.Errorf("%s, %s: %s, want %s", counting, c.name, got, c.want)
					}
				}
			})
		})
	}
}

// TestGlobalQuotaModeCharges: under Options.QuotaMode a request with one
// descriptor over still charges the others, each on its own (the peer
// charges every descriptor), so reg2 is over at its second request.
func TestGlobalQuotaModeCharges(t *testing.T) {
	const cfg = "domain: d\ndescriptors:\n  - key: reg\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: reg2\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	for _, counting := range []rls.Counting{rls.CountAllOrNothing, rls.CountPeer} {
		h := start(t, backends[0], cfg, rls.Options{Counting: counting, QuotaMode: true})
		h.ask(t, "d", 0, desc("reg=a"))
		if got := statusCodes(h.ask(t, "d", 0, desc("reg=a"), desc("reg2=b"))); got != "OK OVER_LIMIT OK" {
			t.Fatalf("%s: %s, want OK OVER_LIMIT OK", counting, got)
		}
		if got := statusCodes(h.ask(t, "d", 0, desc("reg=a"), desc("reg2=b"))); got != "OVER_LIMIT OVER_LIMIT OVER_LIMIT" {
			t.Fatalf("%s: then %s, want OVER_LIMIT OVER_LIMIT OVER_LIMIT", counting, got)
		}
	}
}

// statusCodes renders a response as its overall code and its descriptors' codes.
func statusCodes(r *rlspb.RateLimitResponse) string {
	got := r.OverallCode.String()
	for _, s := range r.Statuses {
		got += " " + s.Code.String()
	}
	return got
}
