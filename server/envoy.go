package server

import (
	"errors"
	"io"
	"net/http"
	"strconv"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// EnvoyConfig holds the settings envoyproxy/ratelimit deployments migrate
// with. Its zero value keeps sluice's defaults.
type EnvoyConfig struct {
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
}

// set sets one of the rls-* settings (see Config.Set).
func (e *EnvoyConfig) set(name, v string) error {
	switch name {
	case "rls-http":
		e.HTTP = v
		return nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return errors.New("want true or false")
	}
	if name == "rls-merge-domains" {
		e.MergeDomains = b
	} else {
		e.ResponseHeaders = &b
	}
	return nil
}

// responseHeaders reports whether RLS answers carry RateLimit headers.
func (e *EnvoyConfig) responseHeaders() bool { return e.ResponseHeaders == nil || *e.ResponseHeaders }

// maxJSONBody bounds a /json request body.
const maxJSONBody = 1 << 20

// envoyHTTPHandler serves envoyproxy/ratelimit's /json and /healthcheck.
func (s *Server) envoyHTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/json", s.serveJSON)
	mux.HandleFunc("/healthcheck", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "draining", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "OK")
	})
	return mux
}

// serveJSON answers a RateLimitRequest in protobuf JSON as
// envoyproxy/ratelimit's /json does: the response in protobuf JSON, 429
// when over the limit, 400 for a request that is not one. A store failure
// is 503 (that service answers 400 for it too).
func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	var req rlspb.RateLimitRequest
	if err == nil {
		err = protojson.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, "not a RateLimitRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := s.rls.shouldRateLimit(r.Context(), &req)
	if err != nil {
		code := http.StatusServiceUnavailable
		if status.Code(err) == codes.InvalidArgument {
			code = http.StatusBadRequest
		}
		http.Error(w, status.Convert(err).Message(), code)
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
