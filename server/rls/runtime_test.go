package rls_test

import (
	"testing"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/server/rls"
)

// table is a decide.Runtime in a map: limit name, key value, override.
type table map[string]map[string]decide.RuntimeOverride

func (t table) Names(limit string) bool { return len(t[limit]) > 0 }

func (t table) Override(limit, value string) (decide.RuntimeOverride, bool) {
	o, ok := t[limit][value]
	return o, ok
}

const named = `
domain: edge
descriptors:
  - key: tenant
    rate_limit: {name: per_tenant, unit: hour, requests_per_unit: 2}
  - key: path
    value: /api/*
    descriptors:
      - key: user
        rate_limit: {name: per_user, unit: hour, requests_per_unit: 2}
  - key: anon
    rate_limit: {unit: hour, requests_per_unit: 2}
`

// TestRuntimeOverrides: the runtime overrides apply to the RLS's named
// rate limits, by the value of a descriptor's last entry: scale 5 lets
// acme through 10 of 12 (and reports 10 per hour), unlimited lifts bulk's
// limit, a nested limit is overridden by its last entry. A value spelled
// otherwise (case, spaces, percent-encoding) is another key, under the
// limit of the file; a descriptor's own limit, an unnamed limit and an
// override its limit cannot take are left alone.
func TestRuntimeOverrides(t *testing.T) {
	rt := table{
		"per_tenant": {"acme": {Scale: 5}, "bulk": {Unlimited: true}, "odd": {Limit: sluice.TokenBucket(sluice.PerHour(100), 100)}},
		"per_user":   {"alice": {Scale: 2}},
		"":           {"anon-1": {Unlimited: true}},
	}
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			h := start(t, b, named, rls.Options{Runtime: rt})
			ok := func(n int, d func() *commonpb.RateLimitDescriptor) (got int, last string) {
				for range n {
					r := h.ask(t, "edge", 0, d())
					if r.OverallCode.String() == "OK" {
						got++
					}
					last = brief(r)
				}
				return got, last
			}
			for _, c := range []struct {
				name  string
				desc  func() *commonpb.RateLimitDescriptor
				n, ok int
				last  string
			}{
				{"acme, scale 5", func() *commonpb.RateLimitDescriptor { return desc("tenant=acme") }, 12, 10, "OVER_LIMIT [OVER_LIMIT 0/10h 59m45s]"},
				{"other", func() *commonpb.RateLimitDescriptor { return desc("tenant=other") }, 4, 2, "OVER_LIMIT [OVER_LIMIT 0/2h 59m45s]"},
				{"bulk, unlimited", func() *commonpb.RateLimitDescriptor { return desc("tenant=bulk") }, 20, 20, "OK [OK unlimited]"},
				{"Acme", func() *commonpb.RateLimitDescriptor { return desc("tenant=Acme") }, 3, 2, ""},
				{"ACME", func() *commonpb.RateLimitDescriptor { return desc("tenant=ACME") }, 3, 2, ""},
				{"' acme'", func() *commonpb.RateLimitDescriptor { return desc("tenant= acme") }, 3, 2, ""},
				{"'acme '", func() *commonpb.RateLimitDescriptor { return desc("tenant=acme ") }, 3, 2, ""},
				{"ac%6De", func() *commonpb.RateLimitDescriptor { return desc("tenant=ac%6De") }, 3, 2, ""},
				{"an override of another algorithm", func() *commonpb.RateLimitDescriptor { return desc("tenant=odd") }, 3, 2, ""},
				{"alice, nested, scale 2", func() *commonpb.RateLimitDescriptor { return desc("path=/api/x", "user=alice") }, 5, 4, ""},
				{"bob, nested", func() *commonpb.RateLimitDescriptor { return desc("path=/api/x", "user=bob") }, 3, 2, ""},
				{"an unnamed limit", func() *commonpb.RateLimitDescriptor { return desc("anon=anon-1") }, 3, 2, ""},
				{"acme's own limit", func() *commonpb.RateLimitDescriptor {
					d := desc("tenant=acme")
					d.Limit = &commonpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typepb.RateLimitUnit_HOUR}
					return d
				}, 4, 3, ""},
			} {
				got, last := ok(c.n, c.desc)
				if got != c.ok || c.last != "" && last != c.last {
					t.Errorf("%s: %d of %d OK (last %s), want %d (%s)", c.name, got, c.n, last, c.ok, c.last)
				}
			}
		})
	}
}

// TestResponseHeadersOfChangedLimits: the RateLimit header fields name the
// limit a decision used, not the one of the file: a runtime override's,
// a descriptor's own limit, and a name two limits of one request share,
// the second numbered.
func TestResponseHeadersOfChangedLimits(t *testing.T) {
	rt := table{"per_tenant": {"acme": {Scale: 5}}}
	h := start(t, backends[0], named, rls.Options{Runtime: rt, ResponseHeaders: true})
	own := desc("anon=x")
	own.Limit = &commonpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typepb.RateLimitUnit_MINUTE}
	for _, c := range []struct {
		name         string
		descs        []*commonpb.RateLimitDescriptor
		policy, left string
	}{
		{"the file's limit", []*commonpb.RateLimitDescriptor{desc("tenant=other")}, `"per_tenant";q=2;w=3600`, `"per_tenant";r=1;t=3585`},
		{"a runtime override", []*commonpb.RateLimitDescriptor{desc("tenant=acme")}, `"per_tenant";q=10;w=3600`, `"per_tenant";r=9;t=3585`},
		{"a descriptor's own limit", []*commonpb.RateLimitDescriptor{own}, `"limit_override";q=7;w=60`, `"limit_override";r=6;t=45`},
		{"a name shared", []*commonpb.RateLimitDescriptor{desc("tenant=b1"), desc("tenant=acme"), desc("anon=y")},
			`"per_tenant";q=2;w=3600, "per_tenant#2";q=10;w=3600, "anon";q=2;w=3600`,
			`"per_tenant";r=1;t=3585, "per_tenant#2";r=8;t=3585, "anon";r=1;t=3585`},
	} {
		got := headerMap(h.ask(t, "edge", 0, c.descs...))
		if got["RateLimit-Policy"] != c.policy || got["RateLimit"] != c.left {
			t.Errorf("%s: RateLimit-Policy %s, RateLimit %s; want %s, %s", c.name, got["RateLimit-Policy"], got["RateLimit"], c.policy, c.left)
		}
	}
}
