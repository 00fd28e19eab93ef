package sluiceotel_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluiceotel"
)

// A service traced with OpenTelemetry records its limits' decisions on
// each request's span. (Here the spans go to an in-memory recorder; a real
// service sets its exporter, and its HTTP instrumentation starts the spans.)
func Example() {
	recorder := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)).Tracer("shop")

	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	otel := sluiceotel.New(sluiceotel.Config{})
	limit, err := httplimit.New(sluice.New(store), httplimit.Config{
		Limits:  []httplimit.Limit{{Name: "per-ip", Key: httplimit.ByIP(&httplimit.ClientIP{}), Limit: sluice.FixedWindow(1, time.Minute)}},
		Observe: otel.ObserveHTTP,
	})
	if err != nil {
		panic(err)
	}
	handler := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 2 {
		ctx, span := tracer.Start(httptest.NewRequest("GET", "/", nil).Context(), "GET /")
		r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
		r.RemoteAddr = "203.0.113.7:4711"
		handler.ServeHTTP(httptest.NewRecorder(), r)
		span.End()
	}
	for _, s := range recorder.Ended() {
		for _, a := range s.Attributes() {
			fmt.Printf("%s=%s ", a.Key, a.Value.Emit())
		}
		for _, e := range s.Events() {
			fmt.Print(e.Name, ":")
			for _, a := range e.Attributes {
				if a.Key != "sluice.key" && a.Key != "sluice.retry_after_ms" {
					fmt.Printf(" %s=%s", a.Key, a.Value.Emit())
				}
			}
		}
		fmt.Println()
	}
	// Output:
	// sluice.limit=per-ip sluice.outcome=admitted sluice.decision: sluice.limit=per-ip sluice.outcome=admitted sluice.degraded=false sluice.quota=1 sluice.remaining=0
	// sluice.limit=per-ip sluice.outcome=refused sluice.decision: sluice.limit=per-ip sluice.outcome=refused sluice.degraded=false sluice.quota=1 sluice.remaining=0
}
