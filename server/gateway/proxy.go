package gateway

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/problem"
)

// newProxy returns the gateway's reverse proxy to upstream. It appends the
// peer's address to X-Forwarded-For, keeping what earlier proxies wrote
// only when the peer is one of them (trusted, as the policy's
// trusted_proxies say; from anyone else the forwarding headers,
// Forwarded and X-Real-IP too, are the client's claims and are dropped),
// sets X-Forwarded-Host and -Proto, passes streaming responses through as
// they come and WebSocket upgrades as they are, and answers 502 when the
// upstream cannot be reached. It times each upstream call (upstreamTime)
// and counts its 502s (upstreamFailed).
func newProxy(upstream *url.URL, trusted func(*http.Request) bool, logger *slog.Logger, upstreamTime func(seconds float64), upstreamFailed func()) *httputil.ReverseProxy {
	var lastLog atomic.Int64
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			if !trusted(pr.In) {
				pr.Out.Header.Del("Forwarded")
				pr.Out.Header.Del("X-Real-Ip")
			} else if xff := pr.In.Header["X-Forwarded-For"]; len(xff) > 0 {
				pr.Out.Header["X-Forwarded-For"] = append([]string(nil), xff...)
			}
			pr.SetXForwarded()
		},
		Transport: timedTransport{observe: upstreamTime, next: &http.Transport{
			Proxy:                 nil, // never through an environment proxy
			MaxIdleConns:          1024,
			MaxIdleConnsPerHost:   256,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: 0, // streaming and slow upstreams are the upstream's business
			ForceAttemptHTTP2:     true,
		}},
		FlushInterval: 50 * time.Millisecond, // and at once for streams of unknown length
		BufferPool:    bufferPool{},          // not a new 32 KB buffer per response
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if now := time.Now().Unix(); lastLog.Swap(now) != now {
				logger.Warn("gateway: upstream failed", "upstream", upstream.String(), "method", r.Method, "path", r.URL.Path, "err", err)
			}
			if r.Context().Err() != nil {
				return // the client went away
			}
			upstreamFailed()
			problem.Write(w, http.StatusBadGateway, "Bad Gateway", "The upstream service could not be reached.", nil)
		},
	}
}

// timedTransport observes the time of each round trip to the upstream:
// until its response headers, or its failure.
type timedTransport struct {
	observe func(seconds float64)
	next    http.RoundTripper
}

func (t timedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(r)
	t.observe(time.Since(start).Seconds())
	return resp, err
}

// demoUpstream is the service the gateway fronts when no upstream is
// configured, so that a newcomer can watch limits work with curl alone:
//
//	/             a greeting
//	/slow?ms=N    answers after N ms (at most 30000)
//	/stream?n=N   N lines, one every 100ms (at most 100)
func demoUpstream() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		ms = min(max(ms, 0), 30000)
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
			fmt.Fprintf(w, "slept %d ms\n", ms)
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		n = min(max(n, 1), 100)
		rc := http.NewResponseController(w)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for i := 1; i <= n; i++ {
			fmt.Fprintf(w, "line %d of %d\n", i, n)
			rc.Flush()
			if i < n {
				select {
				case <-time.After(100 * time.Millisecond):
				case <-r.Context().Done():
					return
				}
			}
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "Hello from sluice's demo upstream. This request was admitted: see the RateLimit header.\n")
	})
	return mux
}

// bufferPool recycles the buffers the proxy copies response bodies through.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }
