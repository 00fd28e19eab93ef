package shed

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/httplimit"
)

// HTTPPriority returns the priority of an HTTP request.
type HTTPPriority func(r *http.Request) Priority

// HeaderPriority reads a request's priority from the header name
// ("critical", "default" or "sheddable", any case), but only from a peer
// that trusted says is a trusted proxy: a client cannot make itself
// critical. A request from any other peer, without the header, with it
// sent more than once, or with another value is Default. A nil trusted
// trusts no peer.
func HeaderPriority(name string, trusted *httplimit.ClientIP) HTTPPriority {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) Priority {
		vs := r.Header[name]
		if len(vs) != 1 || trusted == nil || !trusted.PeerTrusted(r) {
			return Default
		}
		p, err := ParsePriority(vs[0])
		if err != nil {
			return Default
		}
		return p
	}
}

// Middleware returns net/http middleware that admits each request through
// l, with the priority priority gives it (nil: every request is Default).
// A refused request is answered 503 with Retry-After and an RFC 9457
// problem document, made once per priority so that refusing stays cheap
// under overload; the handler's latency is l's sample, unless the client
// went away before it answered.
func (l *Limiter) Middleware(priority HTTPPriority) func(http.Handler) http.Handler {
	retry := strconv.FormatInt(max(1, decide.Seconds(l.cfg.RetryAfter)), 10)
	var refusals [nPriorities]refusal
	for _, p := range Priorities {
		refusals[p] = newRefusal(p, retry)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := Default
			if priority != nil {
				p = priority(r)
			}
			tok, err := l.Acquire(r.Context(), p)
			if err != nil {
				if r.Context().Err() == nil && p < nPriorities {
					refusals[p].write(w)
				}
				return
			}
			defer func() {
				if r.Context().Err() != nil {
					tok.Ignore()
				} else {
					tok.Done()
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// refusal is the answer to a shed request of one priority.
type refusal struct {
	retry, length []string
	body          []byte
}

func newRefusal(p Priority, retry string) refusal {
	body, _ := json.Marshal(map[string]any{
		"type": "about:blank", "title": "Service Unavailable", "status": http.StatusServiceUnavailable,
		"detail":   "The service is overloaded and shed this " + p.String() + " request; retry in " + retry + " s.",
		"priority": p.String(), "retry_after": json.Number(retry),
	})
	return refusal{retry: []string{retry}, length: []string{strconv.Itoa(len(body))}, body: body}
}

// write answers a shed request: 503, Retry-After, the problem document.
func (rf *refusal) write(w http.ResponseWriter) {
	h := w.Header()
	h["Retry-After"] = rf.retry
	h["Content-Type"] = problemType
	h["Content-Length"] = rf.length
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write(rf.body)
}

var problemType = []string{"application/problem+json"}
