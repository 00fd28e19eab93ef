package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/server/metrics"
)

// The status page's history: a point every historyStep for the last
// historyWindow.
const (
	historyStep   = 2 * time.Second
	historyWindow = 10 * time.Minute
)

// recordHistory adds a point to the status page's history every
// historyStep until Shutdown.
func (s *Server) recordHistory() {
	t := time.NewTicker(historyStep)
	defer t.Stop()
	for {
		select {
		case <-s.stopBg:
			return
		case now := <-t.C:
			s.stats.hist.record(now, s.stats.totals())
		}
	}
}

// closeOnceBg stops the background work of Start.
func (s *Server) closeOnceBg() {
	s.stopOnce.Do(func() { close(s.stopBg) })
}

// keyNames returns the key names of the policy limit a store key's rule
// and limit names designate.
func (s *Server) keyNames(rule, limit string) (key, onMissing []string, ok bool) {
	for _, r := range s.currentPolicy().Rules {
		if r.Name != rule {
			continue
		}
		for _, l := range r.Limits {
			if l.Name == limit {
				key, onMissing = l.KeyNames()
				return key, onMissing, true
			}
		}
	}
	return nil, nil, false
}

// knownLimits gives the decision series of every limit of the policy
// (the gateway's and the decision API's) and of the RLS configs their zero
// samples.
func (s *Server) knownLimits() {
	var ls []metrics.KnownLimit
	for _, r := range s.currentPolicy().Rules {
		for _, l := range r.Limits {
			ls = append(ls, metrics.KnownLimit{Name: l.Name, Shadow: r.Shadow, Late: l.Late() != nil})
		}
	}
	if s.cfg.Gateway != "" {
		s.metrics.KnownLimits("gateway", ls)
	}
	if s.cfg.API != "" { // the policy's limits, and explicit checks
		s.metrics.KnownLimits("api", append(ls, metrics.KnownLimit{Name: "explicit", Late: true}))
	}
	if s.rls != nil {
		s.metrics.KnownLimits("rls", s.rls.limits())
	}
}

// countResponses counts the gateway's responses by status code.
func (s *Server) countResponses(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		code := sw.code
		if code == 0 {
			if r.Context().Err() != nil && !sw.wrote {
				return // the client went away before an answer: none was sent
			}
			code = http.StatusOK
		}
		s.metrics.Responses.WithLabelValues(codeLabel(code)).Inc()
	})
}

// codeLabel is the code label of a status: its three digits, or "other"
// for a code outside 100-599 (which net/http would refuse to send).
func codeLabel(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code)
}

// statusWriter remembers the status of a response. Unwrap lets
// http.ResponseController reach the flusher and hijacker beneath it, so
// streams and WebSocket upgrades pass as before.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 || code == http.StatusSwitchingProtocols {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
