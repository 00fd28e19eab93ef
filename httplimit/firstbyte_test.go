package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/decide"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkFirstByte is what the middleware costs a streamed LLM call up
// to its first byte (first-byte-ns/op) and in all (ns/op: with the
// settle), with a token budget against a request limit, on memstore: the
// request's body read and parsed, the reservation, the answer's meter.
func BenchmarkFirstByte(b *testing.B) {
	body := chatBody(100, 200, true)
	event := []byte("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"word word\"}}]}\n\n")
	for _, tokens := range []bool{false, true} {
		b.Run(map[bool]string{false: "request-limit", true: "token-budget"}[tokens], func(b *testing.B) {
			store, _ := memstore.New(memstore.Config{})
			defer store.Close()
			l := httplimit.Limit{Name: "calls", Key: httplimit.ByHeader("X-Tenant"), Limit: sluice.FixedWindow(1<<36, 24*time.Hour)}
			if tokens {
				l.Late = &decide.LateCost{Tokens: &decide.TokenCost{}}
			}
			mw, err := httplimit.New(sluice.New(store), httplimit.Config{Limits: []httplimit.Limit{l}})
			if err != nil {
				b.Fatal(err)
			}
			var start time.Time
			var first time.Duration
			h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(200)
				w.Write(event)
				w.(http.Flusher).Flush()
				first += time.Since(start)
			}))
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
				r.Header.Set("X-Tenant", "acme")
				start = time.Now()
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
			b.ReportMetric(float64(first.Nanoseconds())/float64(b.N), "first-byte-ns/op")
		})
	}
}
