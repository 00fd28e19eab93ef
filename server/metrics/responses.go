package metrics

import (
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// CountResponses counts the gateway's responses by status code.
func (m *Metrics) CountResponses(next http.Handler) http.Handler {
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
		m.Responses.WithLabelValues(codeLabel(code)).Inc()
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

// TooLargeCounter counts the 431s of a listener: in the gateway's
// responses, as any other answer of the gateway.
func (m *Metrics) TooLargeCounter(listener string) func() {
	if listener != "gateway" {
		return func() {}
	}
	return m.Responses.WithLabelValues("431").Inc
}

// RefusedCounter counts refused connections of a listener and logs them
// at most once a second.
func (m *Metrics) RefusedCounter(listener string, log *slog.Logger) func() {
	m.Refused.WithLabelValues(listener) // exported from zero
	var last atomic.Int64
	return func() {
		m.Refused.WithLabelValues(listener).Inc()
		if now := time.Now().Unix(); last.Swap(now) != now {
			log.Warn("connection refused: the listener is at its max_conns", "listener", listener)
		}
	}
}
