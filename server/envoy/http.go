package envoy

import (
	"io"
	"net/http"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/server/rls"
)

// Config holds the settings envoyproxy/ratelimit deployments migrate
// with. Its zero value keeps sluice's defaults.
type Config struct {
	// HTTP is the listen address of envoyproxy/ratelimit's HTTP endpoints:
	// POST /json (a RateLimitRequest in protobuf JSON, answered with the
	// RateLimitResponse: 200, or 429 when over the limit) and
	// /healthcheck (200 "OK" while serving). That service's PORT, by
	// default :8080. Empty (the default): off.
	HTTP string `yaml:"http"`

	// MergeDomains merges RLS config files that name the same domain, as
	// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG=true. Default false: the
	// same domain in two files is an error.
	MergeDomains bool `yaml:"merge_domains"`

	// ResponseHeaders adds the RateLimit and RateLimit-Policy header
	// fields (and Retry-After when over the limit) to every RLS answer,
	// for Envoy to send downstream. Default true; envoyproxy/ratelimit's
	// LIMIT_RESPONSE_HEADERS_ENABLED is off by default.
	ResponseHeaders *bool `yaml:"response_headers"`

	// Counting is how the RLS charges the limits of a request, in domains
	// whose file does not say: "all-or-nothing" (the default: if one
	// descriptor refuses, none is charged, and refused requests are not
	// counted) or "peer" (envoyproxy/ratelimit's: each descriptor on its
	// own, refused hits counted). See package rls, Counting.
	Counting string `yaml:"counting"`

	// StopIncrementWhenOverLimit, with counting "peer", charges only the
	// descriptors that would be over when any would be, as
	// envoyproxy/ratelimit's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true.
	// Default false.
	StopIncrementWhenOverLimit bool `yaml:"stop_increment_when_over_limit"`

	// HealthyWithConfig makes /healthcheck answer 500 and the gRPC health
	// of "ratelimit" NOT_SERVING while no RLS domain is loaded, as
	// envoyproxy/ratelimit's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true.
	// Default false: healthy while serving, with or without domains.
	HealthyWithConfig bool `yaml:"healthy_with_config"`

	// ShadowMode answers every RLS request OK overall, descriptor
	// statuses and counting unchanged, as envoyproxy/ratelimit's
	// SHADOW_MODE=true: run sluice beside it, compare, then enforce.
	// Default false.
	ShadowMode bool `yaml:"shadow_mode"`

	// QuotaMode makes every RLS limit a quota_mode one, as
	// envoyproxy/ratelimit's QUOTA_MODE=true: a request is over only when
	// every descriptor of it but the unlimited ones is over. Default false.
	QuotaMode bool `yaml:"quota_mode"`

	// MaxDescriptors, MaxEntries and MaxLength bound one RLS request: its
	// descriptors, the entries of one, the bytes of its domain and of an
	// entry's key or value. A request beyond them is refused
	// (InvalidArgument; /json 400). 0 (the default) means 64, 16 and 1,024;
	// at most 1,024, 64 and 65,536. envoyproxy/ratelimit has no such bounds.
	MaxDescriptors int `yaml:"max_descriptors"`
	MaxEntries     int `yaml:"max_entries"`
	MaxLength      int `yaml:"max_length"`
}

// Bounds are the request bounds e sets.
func (e *Config) Bounds() rls.Bounds {
	return rls.Bounds{Descriptors: e.MaxDescriptors, Entries: e.MaxEntries, Length: e.MaxLength}
}

// ParseCounting returns the Counting e names (0 when empty).
func (e *Config) ParseCounting() (rls.Counting, error) {
	if e.Counting == "" {
		return 0, nil
	}
	return rls.ParseCounting(e.Counting)
}

// responseHeaders reports whether RLS answers carry RateLimit headers.
func (e *Config) responseHeaders() bool { return e.ResponseHeaders == nil || *e.ResponseHeaders }

// maxJSONBody bounds a /json request body.
const maxJSONBody = 1 << 20

// HTTPHandler serves envoyproxy/ratelimit's /json and /healthcheck;
// ready is false while the server starts and drains.
func (s *Service) HTTPHandler(ready func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/json", s.serveJSON)
	mux.HandleFunc("/healthcheck", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case !ready():
			http.Error(w, "draining", http.StatusInternalServerError)
		case !s.rlsConfigured():
			http.Error(w, "no RLS domain loaded (rls-healthy-with-config)", http.StatusInternalServerError)
		default:
			io.WriteString(w, "OK")
		}
	})
	return mux
}

// rlsConfigured reports whether the RLS is healthy as far as its
// configuration goes: always, unless Envoy.HealthyWithConfig asks for at
// least one loaded domain.
func (s *Service) rlsConfigured() bool {
	return !s.cfg.HealthyWithConfig || len(s.Domains()) > 0
}

// serveJSON answers a RateLimitRequest in protobuf JSON as
// envoyproxy/ratelimit's /json does: the response in protobuf JSON, 429
// when over the limit, 400 for a request that is not one and for one the
// service could not decide (a store failure), as there; the body says
// which.
func (s *Service) serveJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	var req rlspb.RateLimitRequest
	if err == nil {
		err = protojson.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, "not a RateLimitRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := s.svc.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		// envoyproxy/ratelimit answers 400 for every error of the call, a
		// store failure too; clients written for it expect that.
		http.Error(w, "Bad Request: "+status.Convert(err).Message(), http.StatusBadRequest)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}
